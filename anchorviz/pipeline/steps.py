"""The steps of one run: the weak teacher, the students (ceiling, naive, confidence, ANCHOR,
SEAM), the shared reference capture and projection, and each run's drift.

Data flow of one student::

    prepared splits -> teacher (weak backbone, gold labels on teacher_train) -> soft labels q
      -> student (strong backbone, q on w2s_train, method naive | confidence | anchor | seam)
      -> evaluate + capture (one pass per split) -> drift vs the shared reference capture
      -> projection (fitted on the reference) -> metrics with paired bootstrap CIs

Each step is a run directory in a `RunStore` keyed by its run key (`anchorviz.pipeline.keys`):
a finished run is read, not recomputed; a half-written one is redone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import shutil
import sys
import time
import traceback
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from anchorviz.analysis.capture import (
    capture_states,
    load_captured,
    resolve_capture_layers,
    save_captured,
)
from anchorviz.analysis.drift import drift_table
from anchorviz.analysis.metrics import pairwise_accuracy
from anchorviz.analysis.projection import ProjectionMismatch, SharedProjection
from anchorviz.choices import parse_layer_spec
from anchorviz.config import MethodConfig, RunConfig, TrainConfig
from anchorviz.models.reward_model import (
    CHECKPOINT_FILE,
    load_reward_model,
    load_trainable_state,
    save_checkpoint,
)
from anchorviz.models.tokenization import encode_pairs
from anchorviz.paths import storage_error, write_yaml
from anchorviz.pipeline.keys import data_key, reference_key, run_id_for, student_key, teacher_key
from anchorviz.pipeline.prepare import (
    data_config,
    data_drop_report,
    eval_splits,
    protocol_report,
    split_domain,
    teacher_data,
)
from anchorviz.pipeline.results import (
    accuracy_block,
    artifact_columns,
    bootstrap_groups,
    cue_block,
    label_stats,
    transfer_block,
)
from anchorviz.pipeline.store import (
    StoreError,
    config_hash,
    seal_shared,
    verify_run_dir,
    verify_shared_dir,
    write_json,
)
from anchorviz.training.loop import Objective, precision, score_pairs, train_reward_model
from anchorviz.training.losses import resolve_anchor_layers
from anchorviz.training.reference import choose_strategy, make_reference
from anchorviz.training.seam import refine_labels, reward_score_fn
from anchorviz.training.tracking import tracked_run

logger = logging.getLogger(__name__)

__all__ = [
    "TEACHER_OUTPUTS",
    "RunResult",
    "anchor_reference",
    "drop_metrics",
    "encode_run_pairs",
    "ensure_reference_capture",
    "ensure_teacher",
    "evaluate_model",
    "fit_shared_projection",
    "load_backbone",
    "projection_frame",
    "reference_capture_stored",
    "release_memory",
    "run_student",
    "seeded_train",
    "soft_labels",
]


def _dtype(cfg: RunConfig):
    return torch.bfloat16 if cfg.models.dtype == "bfloat16" else None


def seeded_train(train: TrainConfig, cfg: RunConfig) -> TrainConfig:
    """The training settings with the run's seed folded in (shuffling, dropout): runs of a
    sweep's ``seeds`` grid differ; seed 0 keeps ``train.seed`` unchanged."""
    return dataclasses.replace(train, seed=train.seed + cfg.seed)


def load_backbone(cfg: RunConfig, which: str):
    """``(model, tokenizer)`` of the config's teacher (``which="teacher"``) or student: its
    pooling, dtype, attention kernel, dropout and (student only) LoRA settings, torch seeded
    with ``cfg.seed``."""
    m = cfg.models
    name = m.teacher if which == "teacher" else m.student
    dropout = m.teacher_dropout if which == "teacher" else m.student_dropout
    lora = m.student_lora if which != "teacher" else None
    torch.manual_seed(cfg.seed)
    return load_reward_model(name, pooling=m.pooling, dtype=_dtype(cfg),
                             trust_remote_code=m.trust_remote_code, dropout=dropout, lora=lora,
                             attention=m.attention)


def encode_run_pairs(tok, df: pd.DataFrame, cfg: RunConfig):
    """A pair table encoded for the model (`anchorviz.models.tokenization.encode_pairs`) at the
    config's ``data.max_length``."""
    return encode_pairs(tok, df, max_length=cfg.data.max_length)


def evaluate_model(model, tok, data, cfg: RunConfig, capture: bool,
                   train: TrainConfig | None = None):
    """Score every eval split (and capture its states when asked) in one pass per split, in the
    arithmetic of the model's training settings ``train`` (default: the student's; `precision`).

    Returns ``(scores DataFrame, {split: Captured})``."""
    train = cfg.student_train if train is None else train
    with precision(train.bf16, train.device):
        return _evaluate_splits(model, tok, data, cfg, capture, train.device)


def _evaluate_splits(model, tok, data, cfg: RunConfig, capture: bool, dev: str):
    rows, caps = [], {}
    for split in eval_splits(data):
        enc = encode_run_pairs(tok, data[split], cfg)
        if capture:
            cap = capture_states(model, enc, layers=resolve_capture_layers(model, cfg.capture.layers),
                                 batch_size=cfg.capture.batch_size, device=dev,
                                 token_sample=cfg.capture.token_sample, seed=cfg.seed,
                                 desc=f"capture {split}")
            rc, rr = cap.rewards_by_side()
            caps[split] = cap
        else:
            rc, rr = score_pairs(model, enc, batch_size=cfg.capture.batch_size, device=dev)
        frame = pd.DataFrame({"split": split, "domain": split_domain(split, data),
                              "pair_id": enc.pair_ids, "r_chosen": rc, "r_rejected": rr,
                              "group": bootstrap_groups(data[split], enc.pair_ids, split,
                                                         cfg.data.group_key)})
        if cfg.data.artifact_kind != "none":
            frame = frame.assign(**artifact_columns(data[split], enc.pair_ids))
        rows.append(frame)
    return pd.concat(rows, ignore_index=True), caps


def release_memory() -> None:
    """Between nodes: collect what the node left (its model, optimiser, batches) and hand the
    freed heap back to the OS (glibc ``malloc_trim``), so that a worker that runs many nodes
    starts each one nearer its own footprint instead of on top of the last node's peak (measured:
    a second student node started 840 MB above a fresh process without it, 420 MB with it)."""
    import ctypes
    import ctypes.util
    import gc

    gc.collect()
    name = ctypes.util.find_library("c")
    if not name or not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(name).malloc_trim(0)
    except (OSError, AttributeError):  # another libc (musl): nothing to trim
        pass


_PROJECTORS: dict[str, Any] = {}

#: the teacher files its students read (labels, validation labels, scores): hashed in full
#: whenever a finished teacher is used, so changed contents are redone, never trained on
TEACHER_OUTPUTS = ("labels.parquet", "val_labels.parquet", "scores.parquet")


def reference_capture_stored(store, cfg: RunConfig) -> bool:
    """Whether the store holds a finished reference capture for ``cfg`` (its DONE marker names
    this key's hash; a truncated or corrupted marker counts as not finished)."""
    h = config_hash(reference_key(cfg))
    done = store.shared_dir(f"reference-{h}") / "DONE.json"
    try:
        return done.is_file() and json.loads(done.read_text()).get("hash") == h
    except (OSError, ValueError, AttributeError):
        return False


def ensure_reference_capture(store, cfg: RunConfig, data) -> dict:
    """The pretrained student's captures of every eval split: computed once per (backbone,
    data), shared by every run of a sweep."""
    key = reference_key(cfg)
    name = f"reference-{config_hash(key)}"
    folder = store.shared_dir(name)
    splits = eval_splits(data)
    with store.lock(name):
        done = folder / "DONE.json"
        state, why = verify_shared_dir(folder)
        if state == "bad":
            logger.warning("reference capture %s is damaged (%s): recomputing", name, why)
        elif reference_capture_stored(store, cfg):
            try:
                return {s: load_captured(folder / f"{_fname(s)}.safetensors") for s in splits}
            except Exception as err:  # corrupted: recompute
                logger.warning("reference capture %s unreadable (%s): recomputing", name, err)

        model, tok = load_backbone(cfg, "student")
        caps = {}
        st = cfg.student_train
        for s in splits:
            enc = encode_run_pairs(tok, data[s], cfg)
            with precision(st.bf16, st.device):  # the students' arithmetic (drift is not rounding)
                caps[s] = capture_states(model, enc,
                                         layers=resolve_capture_layers(model, cfg.capture.layers),
                                         batch_size=cfg.capture.batch_size,
                                         device=st.device, desc=f"reference {s}")
            save_captured(folder / f"{_fname(s)}.safetensors", caps[s])
        done.write_text(json.dumps({"hash": config_hash(key), "key": key}, default=str))
        seal_shared(folder)  # every capture's sha256: `anchorviz verify` checks them
        del model
        return caps


def _fname(split: str) -> str:
    return split.replace(":", "__")


def fit_shared_projection(ref_caps: dict, layer: int, method: str, fit_rows: int):
    """``(projection, reference xy)``: a `SharedProjection` fitted on a seeded sample of at most
    ``fit_rows`` reference states (head pooling, all splits) at ``layer``, and every reference
    state projected with it."""
    X = np.concatenate([ref_caps[s].states(layer, "head").astype(np.float32) for s in ref_caps])
    rng = np.random.default_rng(0)
    rows = rng.choice(len(X), size=min(len(X), fit_rows), replace=False)
    proj = SharedProjection(method=method, seed=0).fit(X[np.sort(rows)])
    return proj, proj.transform(X)


def _projector(store, cfg: RunConfig, ref_caps: dict, layer: int):
    """``(projection, reference xy)`` of the store's shared map at ``layer``: fitted once per
    store and kept in ``shared/projection-<reference hash>-<layer>-<method>-<rows>/``
    (`SharedProjection.save`), so every worker process, a resumed sweep and the notebooks place
    states in one checked map; held in memory per process after that (a transform-only use)."""
    c = cfg.capture
    name = (f"projection-{config_hash(reference_key(cfg))}-{layer}-{c.projection}-"
            f"{c.projection_fit_rows}")
    memo = f"{store.root}/{name}"
    if memo not in _PROJECTORS:
        folder = store.shared_dir(name)
        with store.lock(name):
            found = None
            if (folder / "projection.json").is_file():
                try:
                    proj, extra = SharedProjection.load(folder)
                    found = proj, extra["reference_xy"]
                except (ProjectionMismatch, KeyError) as err:
                    logger.warning("stored projection not used, fitting it again: %s", err)
            if found is None:
                found = fit_shared_projection(ref_caps, layer, c.projection, c.projection_fit_rows)
                found[0].save(folder, extra={"reference_xy": found[1]})
                seal_shared(folder)
        _PROJECTORS[memo] = found
    return _PROJECTORS[memo]


def _projection_table(store, cfg, data, ref_caps, caps) -> pd.DataFrame:
    layer = max(ref_caps[next(iter(ref_caps))].layers)
    proj, ref_xy = _projector(store, cfg, ref_caps, layer)
    stu = np.concatenate([caps[s].states(layer, "head").astype(np.float32) for s in ref_caps])
    stu_xy = proj.transform(stu)
    return projection_frame(ref_caps, data, layer, ref_xy, stu_xy)


#: how much of each response ``projection.parquet`` keeps (its ``text`` column)
PROJECTION_TEXT_CHARS = 120


def projection_frame(ref_caps: dict, data, layer: int, ref_xy: np.ndarray,
                     stu_xy: np.ndarray) -> pd.DataFrame:
    """The long table of a shared projection: one row per (model, split, pair, side) with its
    2-D coordinates, reference rows first (the layout of ``projection.parquet``); ``text`` is
    the first :data:`PROJECTION_TEXT_CHARS` characters of that side's response (the maps show
    it on hover without rebuilding the data)."""
    meta = []
    for s in ref_caps:
        c = ref_caps[s]
        side = np.where(c.side == 0, "chosen", "rejected")
        pair_ids = np.repeat(c.pair_ids, 2)
        frame = pd.DataFrame({"split": s, "domain": split_domain(s, data),
                              "pair_id": pair_ids, "side": side})
        df = data.get(s)
        if df is not None and {"pair_id", "chosen", "rejected"} <= set(df.columns):
            texts = df.drop_duplicates("pair_id").set_index("pair_id")
            ids = pd.Series(pair_ids)
            full = ids.map(texts["chosen"]).where(side == "chosen", ids.map(texts["rejected"]))
            frame["text"] = full.astype("string").str.slice(0, PROJECTION_TEXT_CHARS)
        meta.append(frame)
    meta = pd.concat(meta, ignore_index=True)
    out = []
    for model_name, xy in (("reference", ref_xy), ("student", stu_xy)):
        t = meta.copy()
        t.insert(0, "model", model_name)
        t.insert(1, "layer", layer)
        t["x"], t["y"] = xy[:, 0], xy[:, 1]
        out.append(t)
    return pd.concat(out, ignore_index=True)


def drift_blocks(caps: dict, ref_caps: dict, data) -> pd.DataFrame:
    stu = {s: {k: caps[s].mean[k].astype(np.float32) for k in caps[s].layers} for s in caps}
    ref = {s: {k: ref_caps[s].mean[k].astype(np.float32) for k in ref_caps[s].layers} for s in caps}
    table = drift_table(stu, ref)
    table.insert(1, "domain", [split_domain(s, data) for s in table["split"]])
    return table


@dataclass
class RunResult:
    run_id: str
    run_dir: Path
    kind: str
    metrics: dict
    computed: bool  # False when it was already finished in the store


@contextlib.contextmanager
def _run_log(path: Path):
    """Copy the package's log records (INFO and up) into the run folder while a run computes."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setLevel(logging.INFO)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    pkg = logging.getLogger("anchorviz")
    old_level = pkg.level
    if pkg.getEffectiveLevel() > logging.INFO:
        pkg.setLevel(logging.INFO)
    extra = []
    if not logging.getLogger().handlers and not pkg.handlers:
        # nobody configured logging: keep warnings on stderr as Python's last resort would
        extra.append(logging.StreamHandler())
        extra[0].setLevel(logging.WARNING)
    for h in (handler, *extra):
        pkg.addHandler(h)
    try:
        yield
    finally:
        for h in (handler, *extra):
            pkg.removeHandler(h)
        pkg.setLevel(old_level)
        handler.close()


def run_guarded(store, run_id: str, key: dict, body,
                hash_files: Collection[str] = ()) -> RunResult:
    """Run ``body(tmp_dir) -> (kind, metrics)`` unless finished; commit atomically or mark failed.

    A finished run is checked cheaply (sizes and mtimes, `anchorviz.pipeline.store.verify_run_dir`)
    except ``hash_files``, hashed in full: the files later steps will read from it, so a run
    whose such file changed in place is redone rather than read."""
    h = config_hash(key)
    try:
        return _run_guarded(store, run_id, key, body, h, hash_files)
    except Exception as err:  # a full or read-only disk: name the run and the path

        out = storage_error(err, store.run_dir(run_id), f"run {run_id} of {store.root}")
        if out is err:
            raise
        raise out from err


def _run_guarded(store, run_id: str, key: dict, body, h: str,
                 hash_files: Collection[str]) -> RunResult:
    with store.lock(run_id):
        if store.is_finished(run_id, h, hash_files=hash_files):
            metrics = json.loads((store.run_dir(run_id) / "metrics.json").read_text())
            return RunResult(run_id, store.run_dir(run_id), key["kind"], metrics, computed=False)
        tmp = store.begin(run_id)
        try:
            write_yaml(tmp / "config.yaml", json.loads(json.dumps(key, default=str)))
            with _run_log(tmp / "run.log"):
                metrics = body(tmp)

            write_json(tmp / "metrics.json", metrics)
            final = store.commit(tmp, run_id, h)
        except BaseException as err:
            try:
                store.fail(tmp, run_id, h, f"{type(err).__name__}: {err}\n{traceback.format_exc()}")
            except OSError as fail_err:  # a full / read-only disk refuses the failure note too
                logger.warning("could not mark run %s failed (%s); its temporary folder is "
                               "removed", run_id, fail_err)
                shutil.rmtree(tmp, ignore_errors=True)
            raise
        return RunResult(run_id, final, key["kind"], metrics, computed=True)


def _tracked(body, cfg: RunConfig, store, run_id: str, key: dict):
    """``body`` with the run's tracker open when ``cfg.report_to`` asks (`anchorviz.training.tracking`:
    the training loop logs each step and validation to it; the final accuracies and transfer
    scores are logged when the run ends). Only runs that are computed are tracked."""
    if not cfg.report_to:
        return body

    def with_tracker(tmp: Path) -> dict:
        with tracked_run(cfg.report_to, store.root, run_id, params=key,
                         tags={"kind": key["kind"]}) as tracker:
            metrics = body(tmp)
            if tracker is not None:
                tracker.log_final(metrics, step=int((metrics.get("train") or {}).get("steps", 0)))
            return metrics

    return with_tracker


def ensure_teacher(store, cfg: RunConfig, data) -> RunResult:
    key = teacher_key(cfg)
    run_id = run_id_for(key)

    full_data = data
    # the teacher reads only the artefacts visible to it, in its own form
    data = teacher_data(data, cfg.data.artifact_teacher_form)

    def body(tmp: Path) -> dict:
        t0 = time.perf_counter()
        model, tok = load_backbone(cfg, "teacher")
        train = encode_run_pairs(tok, data["teacher_train"], cfg)
        val = encode_run_pairs(tok, data["val"], cfg)
        res = train_reward_model(model, train, np.ones(len(train)), seeded_train(cfg.teacher_train, cfg),
                                 val=val, desc="teacher")
        w2s = encode_run_pairs(tok, data["w2s_train"], cfg)
        tt = cfg.teacher_train
        with precision(tt.bf16, tt.device):
            rc, rr = score_pairs(model, w2s, batch_size=cfg.capture.batch_size, device=tt.device)
            vc, vr = score_pairs(model, val, device=tt.device)
        margin = rc - rr
        pd.DataFrame({"pair_id": w2s.pair_ids, "margin": margin}).to_parquet(tmp / "labels.parquet")
        pd.DataFrame({"pair_id": val.pair_ids, "margin": vc - vr}).to_parquet(tmp / "val_labels.parquet")
        acc_val = float(pairwise_accuracy(vc, vr))
        scores, _ = evaluate_model(model, tok, data, cfg, capture=False, train=tt)
        scores.to_parquet(tmp / "scores.parquet")
        res.history.to_parquet(tmp / "history.parquet")
        _save_weights(model, tmp, full=True)  # the whole trained teacher (SEAM re-scores with it)
        return {"kind": "teacher", "method": "teacher", "model": cfg.models.teacher,
                "accuracy": accuracy_block(scores, cfg.capture.n_boot, cfg.seed),
                # reliance on surface cues, read from the texts the teacher scored
                "cues": cue_block(scores, data, cfg.capture.n_boot, cfg.seed),
                "train": {"steps": res.steps, "seconds": res.seconds,
                          "final_loss": float(res.history["total"].iloc[-1]),
                          "val": res.evals.to_dict("records")},
                "labels_raw": label_stats(1 / (1 + np.exp(-margin))),
                "protocol_dropped": protocol_report(full_data),
                # rows each dataset lost while loading, by reason (output, not run key)
                **drop_metrics(full_data),
                "acc_val": acc_val,
                "seconds": time.perf_counter() - t0}

    # what the students of this config will read from the teacher (SEAM: its checkpoint too)

    used = TEACHER_OUTPUTS + ((CHECKPOINT_FILE,) if cfg.method.name == "seam" else ())
    return run_guarded(store, run_id, key, _tracked(body, cfg, store, run_id, key),
                       hash_files=used)


def drop_metrics(data) -> dict:
    """``data_dropped`` (``{dataset: {reason: rows}}``) and ``data_drop_examples`` (``{dataset:
    {reason: [[row, why], ...]}}``) of prepared data, for the teacher's metrics.json."""
    report = data_drop_report(data)
    return {"data_dropped": {k: dict(r["dropped"]) for k, r in report.items()},
            "data_drop_examples": {k: r["examples"] for k, r in report.items() if r["examples"]}}


def _require_intact(run: RunResult, files: Collection[str]) -> None:
    """Hash ``files`` of a finished run against its manifest before they are read; raises
    `StoreError` naming the file when one changed (the next run of the sweep redoes it)."""
    ok, why = verify_run_dir(run.run_dir, hash_files=files)
    if not ok:
        raise StoreError(f"{run.kind} run {run.run_id} changed since it was written ({why}): "
                         "run the same command again to redo it")


def soft_labels(margin: np.ndarray, method: MethodConfig) -> np.ndarray:
    """Teacher margins -> the student's target probabilities (temperature, optional hardening)."""
    if method.hard_labels:
        return np.where(margin > 0, 1.0, np.where(margin < 0, 0.0, 0.5))
    return 1.0 / (1.0 + np.exp(-margin / method.label_temperature))


def _save_weights(model, tmp: Path, full: bool = True) -> None:
    """Save the trained model as ``checkpoint/trainable.safetensors``: the reward head plus the
    LoRA adapters, or every backbone weight of a full fine-tune, with the base model's identity
    in the metadata (`anchorviz.models.save_checkpoint`; `load_run_model` reads it back).
    ``full`` is ignored: the checkpoint always covers what was trained (it once chose a
    head-only file, which made a fully fine-tuned student's checkpoint not the student)."""
    save_checkpoint(model, tmp / CHECKPOINT_FILE)


def _seam_labels(store, cfg: RunConfig, data, teacher: RunResult, q: np.ndarray, tmp: Path):
    """SEAM label refinement (anchorviz.training.seam, docs/SEAM.md): the pretrained generative student
    writes principle trees; the trained weak teacher annotates the informative nodes."""
    from safetensors.torch import load_file

    _require_intact(teacher, (CHECKPOINT_FILE,))
    state = load_file(str(teacher.run_dir / CHECKPOINT_FILE))
    if not any(k.startswith("backbone.") for k in state):
        raise RuntimeError(f"teacher run {teacher.run_id} saved only its head; SEAM needs the "
                           "trained teacher: delete that run directory and rerun")
    tmodel, ttok = load_backbone(cfg, "teacher")
    load_trainable_state(tmodel, state)
    dev = cfg.teacher_train.device
    tmodel.to(dev)
    # SEAM's generation and its re-scoring by the teacher run in float32 whatever the bf16 settings
    score = reward_score_fn(tmodel, ttok, max_length=cfg.data.max_length,
                            batch_size=cfg.capture.batch_size, device=dev)
    cache = store.shared_dir("seam") / (
        f"trees-{config_hash({'data': data_key(data_config(cfg)), 'generator': cfg.models.student})}.json")
    res = refine_labels(data["w2s_train"], q, score, cfg.models.student,
                        temperature=cfg.method.label_temperature, seed=cfg.seed,
                        device=cfg.student_train.device,
                        num_threads=1 if cfg.student_train.device == "cpu" else None,
                        cache_path=cache)
    with store.lock("seam"):  # the cache's files as they are now: `anchorviz verify`
        seal_shared(cache.parent)
    res.save(tmp / "seam")
    del tmodel
    return res.q, res.counts


def anchor_reference(model, objective, train, cfg: RunConfig):
    """The frozen reference ANCHOR compares ``model`` with on the ``train`` pairs, by the
    strategy ``cfg.method.reference`` resolves to; returns ``(reference, info)`` (strategy, why,
    set-up seconds). The caller closes the reference."""
    n_tok = sum(len(x) for x in train.chosen_ids) + sum(len(x) for x in train.rejected_ids)
    strategy, why = choose_strategy(model, cfg.method.reference, n_tok, len(objective.anchor_layers))
    logger.info("reference strategy %s (%s)", strategy, why)
    t_ref = time.perf_counter()
    st = cfg.student_train
    with precision(st.bf16, st.device):  # cached states in the student's arithmetic
        reference = make_reference(strategy, model, objective.anchor_layers, train,
                                   **({"device": st.device} if strategy == "cached" else {}))
    return reference, {"strategy": strategy, "reason": why,
                       "setup_seconds": time.perf_counter() - t_ref}


def run_student(store, cfg: RunConfig, data, kind: str = "student",
                teacher: RunResult | None = None, ceiling: RunResult | None = None) -> RunResult:
    """Train and analyse one student (``kind="student"``) or the gold ceiling (``"ceiling"``)."""
    key = student_key(cfg, kind)
    run_id = run_id_for(key)

    def body(tmp: Path) -> dict:
        t0 = time.perf_counter()
        model, tok = load_backbone(cfg, "student")
        train = encode_run_pairs(tok, data["w2s_train"], cfg)
        val = encode_run_pairs(tok, data["val"], cfg)
        info: dict[str, Any] = {"kind": kind, "model": cfg.models.student}
        # the teacher's scores (and, for a student, its labels) are read below
        _require_intact(teacher, ("scores.parquet",) if kind == "ceiling" else TEACHER_OUTPUTS)
        if kind == "ceiling":
            q, val_q, method = np.ones(len(train)), np.ones(len(val)), "ceiling"
            objective = Objective()
        else:
            labels = pd.read_parquet(teacher.run_dir / "labels.parquet")
            vlabels = pd.read_parquet(teacher.run_dir / "val_labels.parquet")
            if list(labels["pair_id"]) != train.pair_ids:
                raise RuntimeError("teacher labels do not line up with the w2s_train pairs")
            q = soft_labels(labels["margin"].to_numpy(), cfg.method)
            val_q = soft_labels(vlabels["margin"].to_numpy(), cfg.method)
            if cfg.method.name == "seam":
                q, info["seam"] = _seam_labels(store, cfg, data, teacher, q, tmp)
            method = cfg.method.name
            layers = []
            if method == "anchor":
                layers = resolve_anchor_layers(parse_layer_spec(cfg.method.anchor_layers),
                                               model.n_layers)
            objective = Objective(kind="confidence" if method == "confidence" else "bt",
                                  aux_coef=cfg.method.aux_coef,
                                  aux_warmup_frac=cfg.method.aux_warmup_frac,
                                  anchor_lambda=cfg.method.anchor_lambda if layers else 0.0,
                                  anchor_layers=layers,
                                  anchor_normalise=cfg.method.anchor_normalise)
            info["labels"] = label_stats(q)
            pd.DataFrame({"pair_id": train.pair_ids, "q": q}).to_parquet(tmp / "labels.parquet")
        reference = None
        if objective.anchored:
            reference, info["reference"] = anchor_reference(model, objective, train, cfg)
        try:
            res = train_reward_model(model, train, q, seeded_train(cfg.student_train, cfg), objective=objective,
                                     reference=reference, val=val, val_targets=val_q, desc=run_id)
        finally:
            if reference is not None:
                reference.close()
        res.history.to_parquet(tmp / "history.parquet")
        release_memory()  # the optimiser state and the last batches: not needed to evaluate
        # gold accuracy on the SOURCE validation split: for choosing hyper-parameters (lambda,
        # layers, lr) without looking at any target; training itself never sees these labels
        with precision(cfg.student_train.bf16, cfg.student_train.device):
            vc, vr = score_pairs(model, val, batch_size=cfg.capture.batch_size,
                                 device=cfg.student_train.device)
        info["acc_val"] = float(pairwise_accuracy(vc, vr))
        release_memory()
        # scored the same way with or without the capture (the capture's rewards are the
        # scoring pass's): a run without it has no drift, projection or hidden states
        scores, caps = evaluate_model(model, tok, data, cfg, capture=cfg.capture.enabled)
        scores.to_parquet(tmp / "scores.parquet")
        # the model is not needed by the analysis below: saved and dropped first, and the heap
        # handed back between the analysis steps, so that drift (CKA's Gram matrices) and the
        # projection (its distance matrices) do not stack on the training's leftovers (a
        # captured demo node peaked at 1.59 GB without these releases; docs/BENCHMARKS.md)
        _save_weights(model, tmp, full=cfg.models.student_lora is not None)
        del model
        release_memory()
        if cfg.capture.enabled:
            ref_caps = ensure_reference_capture(store, cfg, data)
            drift_blocks(caps, ref_caps, data).to_parquet(tmp / "drift.parquet")
            release_memory()
            if cfg.capture.projection != "none":
                _projection_table(store, cfg, data, ref_caps, caps).to_parquet(
                    tmp / "projection.parquet")
                release_memory()
            if cfg.capture.save_hidden:
                for s, c in caps.items():
                    save_captured(tmp / "hidden" / "student" / f"{_fname(s)}.safetensors", c)
        teacher_scores = pd.read_parquet(teacher.run_dir / "scores.parquet")
        info.update({
            "method": method,
            "accuracy": accuracy_block(scores, cfg.capture.n_boot, cfg.seed),
            "cues": cue_block(scores, data, cfg.capture.n_boot, cfg.seed),
            # PGR needs the ceiling, which trains in parallel: the results table computes it
            # from the stored scores of the three runs (`pgr_from_runs`)
            "transfer": transfer_block(scores, teacher_scores, None,
                                        cfg.capture.n_boot, cfg.seed),
            "train": {"steps": res.steps, "seconds": res.seconds,
                      "final_loss": float(res.history["total"].iloc[-1]),
                      "first_loss": float(res.history["total"].iloc[0]),
                      "val": res.evals.to_dict("records")},
            "teacher_run": teacher.run_id,
            "ceiling_run": (run_id_for(student_key(cfg, "ceiling"))
                            if cfg.ceiling and kind == "student" else None),
            "seconds": time.perf_counter() - t0,
        })
        return info

    return run_guarded(store, run_id, key, _tracked(body, cfg, store, run_id, key))
