"""Benchmark: naive W2S training throughput, anchorviz's loop vs TRL's ``RewardTrainer``.

The same work on both sides: the same backbone (``minilm-l6``; TRL loads it as
``AutoModelForSequenceClassification`` with ``num_labels=1``), the SAME token ids (encoded once by
``anchorviz.models.tokenization.encode_pairs``, max_length 64, handed to TRL pre-tokenised as
``chosen_ids`` / ``rejected_ids``), the same batches (TRL reads the pairs in the order
anchorviz's seeded shuffle visits them, with ``train_sampling_strategy="sequential"``), batch 16
pairs (one padded forward of 32 sequences on both sides), fp32, dropout off, the same number of
optimiser steps, gradient clipping at 1.0. TRL trains on hard chosen / rejected pairs (no soft
labels), so anchorviz runs with hard labels too (q = 1.0: the BT loss is then exactly TRL's
``-log sigmoid(r_chosen - r_rejected)``).

anchorviz runs with the package's default optimiser (``TrainConfig.optimizer``, ``adamw_fused``:
``torch.optim.AdamW(fused=True)``, the same kernel as TRL's default ``adamw_torch_fused``), and
once more with ``adamw`` (the single-tensor per-parameter loop, the default before), so the
optimiser's share is visible on both sides; TRL runs with its default and with
``optim="adamw_torch"`` (single-tensor too). Ratios are throughput x TRL's default: the target is
anchorviz (default) >= 1.0x ``trl``.

TRL is NOT a project dependency: it lives in its own venv (default ``/tmp/trlvenv``, made with
``python3 -m venv /tmp/trlvenv && /tmp/trlvenv/bin/pip install torch==2.13.0 &&
/tmp/trlvenv/bin/pip install trl transformers==<the project's version> accelerate numpy pandas
datasets``; here the CPU torch wheel, TRL 1.16.0 and transformers 5.25.0). This script runs
anchorviz in-process and TRL in a long-lived worker subprocess of that venv; the two are
interleaved round by round (the idle side waits on a pipe, using no CPU).

Usage (what produced docs/BENCHMARKS.md)::

    python bench/bench_trl.py

Throughput = pairs trained / seconds of the training loop (anchorviz: ``TrainResult.seconds``,
which starts after optimiser setup; TRL: ``on_train_begin`` -> ``on_train_end`` of a callback).
The whole call (``train_reward_model(...)`` / ``trainer.train()``, setup included) is reported too.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

TRL_PYTHON = os.environ.get("ANCHORVIZ_TRL_PYTHON", "/tmp/trlvenv/bin/python")
_TAG = "@@bench_trl "  # protocol lines (Trainer prints its own dicts to stdout)
ANCHORVIZ_VARIANTS = {  # name -> TrainConfig.optimizer (None: the package default)
    "anchorviz": None,  # the default: adamw_fused
    "anchorviz-adamw": "adamw",  # single-tensor AdamW, the same code as TRL's adamw_torch
}
BASELINE = "trl"  # ratios are throughput x this row
TRL_VARIANTS = {  # name -> RewardConfig overrides
    "trl": {},  # TRL / transformers defaults (optim adamw_torch_fused with torch >= 2.8)
    "trl-adamw_torch": {"optim": "adamw_torch"},  # the same optimiser code as anchorviz's loop
}


# --------------------------------------------------------------------------- TRL worker side


def trl_worker(spec_path: str) -> None:
    """Runs under the TRL venv: builds the trainers, then serves ``run`` commands on stdin."""
    import logging

    import torch
    import transformers
    import trl
    from datasets import Dataset
    from transformers import AutoModelForSequenceClassification, TrainerCallback
    from trl import RewardConfig, RewardTrainer

    transformers.logging.set_verbosity_error()
    logging.getLogger("trl").setLevel(logging.ERROR)
    spec = json.loads(Path(spec_path).read_text())
    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    ds = Dataset.from_dict({"chosen_ids": spec["chosen_ids"], "rejected_ids": spec["rejected_ids"]})
    use_cpu = spec["device"] == "cpu"

    class Clock(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_train_end(self, args, state, control, **kw):
            self.t1 = time.perf_counter()
            self.steps = state.global_step

    import dataclasses

    fields = {f.name for f in dataclasses.fields(RewardConfig)}
    ckpt = "activation_checkpointing" if "activation_checkpointing" in fields else \
        "gradient_checkpointing"
    models = {}
    configs = {}
    for name, over in spec["variants"].items():
        torch.manual_seed(spec["seed"])
        models[name] = AutoModelForSequenceClassification.from_pretrained(
            spec["model_path"], num_labels=1)
        configs[name] = dict(
            output_dir=tempfile.mkdtemp(prefix=f"trl-bench-{name}-"),
            per_device_train_batch_size=spec["batch_size"], gradient_accumulation_steps=1,
            max_steps=spec["steps"], learning_rate=5e-5, lr_scheduler_type="linear",
            warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0, seed=spec["seed"],
            bf16=False, fp16=False, disable_dropout=True, **{ckpt: False},
            center_rewards_coefficient=None, max_length=spec["max_length"],
            train_sampling_strategy="sequential", dataloader_num_workers=0,
            dataloader_pin_memory=False, logging_strategy="no", save_strategy="no",
            eval_strategy="no", report_to="none", disable_tqdm=True, use_cpu=use_cpu, **over)
    info = {"trl": trl.__version__, "transformers": transformers.__version__,
            "torch": torch.__version__, "threads": torch.get_num_threads(), "model_class": type(next(iter(models.values()))).__name__}

    def run(name: str) -> dict:
        clock = Clock()
        trainer = RewardTrainer(model=models[name], args=RewardConfig(**configs[name]),
                                train_dataset=ds, callbacks=[clock])
        c0, t0 = time.process_time(), time.perf_counter()
        trainer.train()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        opt = trainer.optimizer
        opt = getattr(opt, "optimizer", opt)  # Accelerate wraps it
        defaults = getattr(opt, "defaults", {})
        kind = ("fused" if defaults.get("fused") else "foreach" if defaults.get("foreach")
                else "single-tensor")
        return {"loop_s": clock.t1 - clock.t0, "call_s": wall, "cpu_s": cpu, "steps": clock.steps,
                "optim": f"{getattr(trainer.args.optim, 'value', trainer.args.optim)} "
                         f"({type(opt).__name__}, {kind})"}

    print(_TAG + json.dumps({"ready": True, **info}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd.get("cmd") == "quit":
            break
        try:
            out = run(cmd["variant"])
        except Exception as err:  # reported to the parent, which stops
            out = {"error": f"{type(err).__name__}: {err}"}
        print(_TAG + json.dumps(out), flush=True)


class TRLWorker:
    """The parent's handle on the TRL worker process."""

    def __init__(self, python: str, spec_path: Path) -> None:
        self.proc = subprocess.Popen(
            [python, __file__, "--trl-worker", str(spec_path)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, env={**os.environ, "TQDM_DISABLE": "1",
                                                    "TRANSFORMERS_VERBOSITY": "error"})
        self.info = self._read()
        if not self.info.get("ready"):
            raise RuntimeError(f"TRL worker did not start: {self.info}")

    def _read(self) -> dict:
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"TRL worker exited (rc {self.proc.poll()})")
            if line.startswith(_TAG):
                return json.loads(line[len(_TAG):])

    def run(self, variant: str) -> dict:
        self.proc.stdin.write(json.dumps({"cmd": "run", "variant": variant}) + "\n")
        self.proc.stdin.flush()
        out = self._read()
        if "error" in out:
            raise RuntimeError(f"TRL {variant}: {out['error']}")
        return out

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=30)
            except Exception:
                self.proc.kill()


# --------------------------------------------------------------------------- parent side


def trl_available(python: str) -> tuple[bool, str]:
    if not Path(python).exists():
        return False, f"{python} does not exist"
    proc = subprocess.run([python, "-c", "import trl, transformers; print(trl.__version__)"],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        return False, proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "import failed"
    return True, proc.stdout.strip()


def prepare(args, tmp: Path, pairs=None):
    """The anchorviz model and encoded pairs, and the TRL worker's spec file (same token ids)."""
    import numpy as np

    from anchorviz.models.reward_model import load_reward_model
    from anchorviz.models.tokenization import encode_pairs
    from anchorviz.models.zoo import resolve_model

    n = args.batch_size * args.steps
    if pairs is None:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from bench_step import load_data

        pairs = load_data(args.data, n, args.seed)
    import torch

    torch.manual_seed(args.seed)
    model, tok = load_reward_model(args.model, dropout=False)
    enc = encode_pairs(tok, pairs.iloc[:n], max_length=args.max_length)
    perm = np.random.default_rng(args.seed).permutation(len(enc)).tolist()  # anchorviz's order
    spec = {"model_path": str(resolve_model(args.model)), "seed": args.seed,
            "batch_size": args.batch_size, "steps": args.steps, "max_length": args.max_length,
            "device": args.device, "threads": args.threads, "variants": {k: TRL_VARIANTS[k] for k in args.trl_variants},
            "chosen_ids": [enc.chosen_ids[i] for i in perm],
            "rejected_ids": [enc.rejected_ids[i] for i in perm]}
    spec_path = tmp / "trl_spec.json"
    spec_path.write_text(json.dumps(spec))
    tokens = sum(map(len, enc.chosen_ids)) + sum(map(len, enc.rejected_ids))
    return model, enc, spec_path, tokens


_OPT_KIND = {"adamw_fused": "fused", "adamw_foreach": "foreach", "adamw": "single-tensor"}


def anchorviz_run(model, enc, args, optimizer: str | None = None) -> dict:
    import numpy as np

    from anchorviz.config import TrainConfig
    from anchorviz.training.loop import train_reward_model

    opt = {"optimizer": optimizer} if optimizer else {}  # else the package default
    cfg = TrainConfig(lr=5e-5, epochs=1, batch_size=args.batch_size, seed=args.seed,
                      device=args.device, progress=False, warmup_frac=0.0, max_grad_norm=1.0,
                      **opt)
    c0, t0 = time.process_time(), time.perf_counter()
    res = train_reward_model(model, enc, np.ones(len(enc)), cfg, desc="anchorviz")
    return {"loop_s": res.seconds, "call_s": time.perf_counter() - t0,
            "cpu_s": time.process_time() - c0, "steps": res.steps,
            "optim": f"{cfg.optimizer} (torch.optim.AdamW, {_OPT_KIND.get(cfg.optimizer, '?')})"}


def measure(args, log=print, pairs=None) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-trl-") as tmp:
        model, enc, spec_path, tokens = prepare(args, Path(tmp), pairs)
        worker = TRLWorker(args.trl_python, spec_path)
        loads: list[float] = []
        try:
            results = {k: [] for k in args.anchorviz_variants}
            results.update({k: [] for k in args.trl_variants})

            def call(name):
                if name in ANCHORVIZ_VARIANTS:
                    return anchorviz_run(model, enc, args, ANCHORVIZ_VARIANTS[name])
                return worker.run(name)

            for name in results:  # warm-up, untimed
                call(name)
            for r in range(args.repeats):
                names = list(results)
                names = names[r % len(names):] + names[: r % len(names)]
                row = {}
                for name in names:
                    row[name] = call(name)
                    results[name].append(row[name])
                log(f"round {r + 1}/{args.repeats} (load {common.loadavg()[0]:.2f}): " + ", ".join(
                    f"{k} {v['loop_s']:.2f}s" for k, v in row.items()))
                loads.append(common.loadavg()[0])
        finally:
            worker.close()
    return {"runs": results, "info": worker.info, "tokens": tokens, "n_pairs": len(enc),
            "loads": loads}


def markdown(res: dict, args, command: str, facts: dict, elapsed: float) -> str:
    runs, info = res["runs"], res["info"]
    n = res["n_pairs"]
    base = BASELINE if BASELINE in runs else next(iter(runs))
    base_loop = [r["loop_s"] for r in runs[base]]
    base_call = [r["call_s"] for r in runs[base]]
    base_cpu = [r.get("cpu_s", float("nan")) for r in runs[base]]
    rows, ratio, cpu_ratio = [], {}, {}
    for name, rs in runs.items():
        loop = [r["loop_s"] for r in rs]
        call = [r["call_s"] for r in rs]
        steps = rs[0]["steps"]
        # throughput(name) / throughput(base) = t(base) / t(name), per round
        r_loop = common.ratio_summary(base_loop, loop)
        r_call = common.ratio_summary(base_call, call)
        cpu = [r.get("cpu_s", float("nan")) for r in rs]
        r_cpu = common.ratio_summary(base_cpu, cpu)
        ratio[name], cpu_ratio[name] = r_loop, r_cpu
        rows.append([f"`{name}`", "anchorviz" if name in ANCHORVIZ_VARIANTS else "TRL", steps,
                     f"{n / common.median(loop):.1f}", f"{n / common.median(call):.1f}",
                     f"{common.median(loop) / steps:.3f}",
                     f"{r_loop[0]:.3f} ({r_loop[1]:.2f}-{r_loop[2]:.2f})",
                     f"{r_call[0]:.3f}", f"{common.median(cpu) / steps:.3f}",
                     f"{r_cpu[0]:.3f} ({r_cpu[1]:.2f}-{r_cpu[2]:.2f})", rs[-1].get("optim", "?")])
    headers = ["variant", "trainer", "steps / round", "pairs / s (loop)",
               "pairs / s (whole call)", "s / step", f"throughput x `{base}` (loop; range)",
               f"x `{base}` (whole call)", "CPU s / step (whole call)",
               f"CPU throughput x `{base}` (whole call; range)", "optimiser"]
    table = common.md_table(headers, rows)
    loads = res.get("loads") or []
    load_txt = (f"load average (1 min) after each round: mean {sum(loads) / len(loads):.1f}, "
                f"range {min(loads):.1f}-{max(loads):.1f}" if loads else "")
    intro = (
        f"Backbone `{args.model}` (anchorviz: `RewardModel`, mean pooling + zero-initialised "
        f"linear head; TRL: `{info.get('model_class')}`, num_labels = 1, i.e. the BERT pooler + "
        f"classifier on [CLS]). {n} `{args.data}` pairs ({res['tokens']:,} tokens, both sides), "
        f"batch {args.batch_size} pairs, max_length {args.max_length}, fp32, dropout off, "
        f"`{args.device}`, {args.repeats} interleaved rounds (order rotating) after one untimed "
        f"warm-up call each; ratios are medians of per-round ratios (range over rounds) against "
        f"`{base}` (TRL with its default optimiser). 'CPU' is the process CPU time (all threads) "
        "of the whole call (`train_reward_model(...)` / `trainer.train()`), which other jobs' "
        "load disturbs less than wall time (with 1 thread; with 2, a thread spinning while the "
        "other waits for a core counts too). "
        f"TRL {info.get('trl')}, transformers {info.get('transformers')}, torch "
        f"{info.get('torch')} ({info.get('threads')} threads) in the separate venv "
        f"(`{args.trl_python}`)." + (f" {load_txt[0].upper() + load_txt[1:]}." if load_txt else "")
    )
    notes = []
    if "anchorviz" in ratio and base == BASELINE:
        r = ratio["anchorviz"]
        c = cpu_ratio["anchorviz"]
        notes.append(
            f"- Target: anchorviz (default optimiser) >= 1.0x TRL's `RewardTrainer` throughput: "
            f"{common.met(r[0] >= 1.0)} in wall time ({r[0]:.3f}x, per-round range "
            f"{r[1]:.2f}-{r[2]:.2f}); {common.met(c[0] >= 1.0)} in process CPU time "
            f"({c[0]:.3f}x, range {c[1]:.2f}-{c[2]:.2f}).")
    if "anchorviz-adamw" in ratio and "trl-adamw_torch" in ratio and base == BASELINE:
        a = common.ratio_summary([x["loop_s"] for x in runs["trl-adamw_torch"]],
                                 [x["loop_s"] for x in runs["anchorviz-adamw"]])
        ac = common.ratio_summary([x.get("cpu_s", float("nan")) for x in runs["trl-adamw_torch"]],
                                  [x.get("cpu_s", float("nan")) for x in runs["anchorviz-adamw"]])
        notes.append(
            f"- Same single-tensor AdamW on both sides (the loops alone): `anchorviz-adamw` is "
            f"{a[0]:.3f}x `trl-adamw_torch` in wall time (range {a[1]:.2f}-{a[2]:.2f}), "
            f"{ac[0]:.3f}x in CPU time (range {ac[1]:.2f}-{ac[2]:.2f}).")
    notes += [
        "- TRL settings: `RewardConfig(per_device_train_batch_size=16, max_steps=N, "
        "learning_rate=5e-5, lr_scheduler_type='linear', warmup_steps=0, bf16=False, fp16=False, "
        "activation_checkpointing=False` (TRL's defaults are bf16 = True and gradient "
        "checkpointing = True), `disable_dropout=True, center_rewards_coefficient=None, max_length=64, "
        "train_sampling_strategy='sequential', dataloader_num_workers=0, "
        "dataloader_pin_memory=False, logging_strategy='no', save_strategy='no', "
        "eval_strategy='no', report_to='none', disable_tqdm=True, use_cpu=True)`; the dataset is "
        "passed pre-tokenised (`chosen_ids` / `rejected_ids`), so TRL's EOS appending and "
        "tokenisation are skipped and both sides see identical ids and identical batches.",
        "- `anchorviz` trains with the package default `TrainConfig.optimizer = \"adamw_fused\"` "
        "(`torch.optim.AdamW(fused=True)`, the kernel behind TRL's default `adamw_torch_fused`); "
        "`anchorviz-adamw` with `optimizer=\"adamw\"` (single-tensor), the same code as "
        "`trl-adamw_torch`, so those two rows compare the trainer loops alone.",
        "- A fresh optimiser per round on both sides (anchorviz: per `train_reward_model` call; "
        "TRL: a new `RewardTrainer` per round around the same model object; its construction is "
        "outside both timings). TRL's `compute_loss` also gathers reward statistics every step "
        "(`.item()` calls); that is part of what TRL costs.",
        "- Not compared: soft labels (TRL has none), ANCHOR, evaluation.",
    ]
    return common.section("bench_trl", intro, table, "\n".join(notes), command, facts, elapsed)


def unavailable_markdown(reason: str, command: str, facts: dict) -> str:
    return common.section(
        "bench_trl", f"TRL could not be used: {reason}. Install it in a separate venv (see the "
        "docstring of `bench/bench_trl.py`) and rerun.", "", "", command, facts)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="minilm-l6")
    ap.add_argument("--data", default="vader-movie", help="a load_pairs name or 'synthetic'")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-length", type=int, default=64)
    ap.add_argument("--steps", type=int, default=4, help="optimiser steps per round")
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0,
                    help="torch intra-op threads on both sides (0: torch's default)")
    ap.add_argument("--trl-python", default=TRL_PYTHON, help="python of the TRL venv")
    ap.add_argument("--trl-variants", nargs="+", default=list(TRL_VARIANTS),
                    choices=list(TRL_VARIANTS))
    ap.add_argument("--anchorviz-variants", nargs="+", default=list(ANCHORVIZ_VARIANTS),
                    choices=list(ANCHORVIZ_VARIANTS))
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--trl-worker", default=None, help=argparse.SUPPRESS)
    return ap


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.trl_worker:
        trl_worker(args.trl_worker)
        return
    os.environ.setdefault("TQDM_DISABLE", "1")
    import logging

    logging.basicConfig(level=logging.WARNING)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    facts = common.machine_facts()
    command = common.command_line("bench_trl.py", argv)
    ok, why = trl_available(args.trl_python)
    t0 = time.time()
    if not ok:
        md = unavailable_markdown(why, command, facts)
    else:
        res = measure(args, log=lambda m: print(m, file=sys.stderr, flush=True))
        md = markdown(res, args, command, facts, time.time() - t0)
    print(md)
    if not args.no_write:
        print(f"updated {common.update_section('bench_trl', md)}", file=sys.stderr)


if __name__ == "__main__":
    main()
