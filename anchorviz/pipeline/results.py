"""The results table: one row per finished run of a sweep folder, and the metric blocks of a run.

`results_table(out_dir)` reads every finished run folder (its ``config.yaml`` key and
``metrics.json``) and writes ``results.parquet`` / ``results.csv``; the figures
(`anchorviz.viz`) and the summaries (`anchorviz.analysis.summary`) read that table. The accuracy
and transfer blocks (paired bootstrap intervals, WRG / PGR) that the steps write into each run's
``metrics.json`` are computed here.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from anchorviz.analysis.cues import cue_reliance, cue_sides
from anchorviz.analysis.metrics import (
    accuracy_by_group,
    bootstrap_accuracy_ci,
    bootstrap_kind,
    paired_bootstrap_transfer,
    per_pair_correct,
)
from anchorviz.config import DataConfig
from anchorviz.data.entries import dataset_label, target_name
from anchorviz.paths import read_yaml, write_atomic
from anchorviz.pipeline.keys import SPLIT_PROTOCOL
from anchorviz.pipeline.prepare import prepare_data, teacher_data
from anchorviz.pipeline.store import RunStore

logger = logging.getLogger(__name__)

__all__ = [
    "artifact_accuracy",
    "artifact_columns",
    "cue_block",
    "cue_follow_columns",
    "run_cues",
    "drift_columns",
    "base_config_columns",
    "pgr_from_runs",
    "results_table",
    "results_text",
]


def bootstrap_groups(df: pd.DataFrame, pair_ids: list, split: str, group_key: str) -> list[str]:
    """The resampling unit of each scored pair: its prompt (prefixed by the split) when the split
    holds several pairs per prompt, else the pair itself (see `metrics.bootstrap_kind`)."""
    if group_key != "none" and "prompt" in df and df["prompt"].nunique() > 1:
        prompt_of = dict(zip(df["pair_id"].astype(str), df["prompt"].astype(str)))
        return [f"{split}\x00{prompt_of.get(str(p), str(p))}" for p in pair_ids]
    return [f"{split}\x00pair\x00{p}" for p in pair_ids]


def _groups(scores: pd.DataFrame, splits: list[str] | None = None) -> list | None:
    """Bootstrap groups in `_correct`'s order (None for scores stored before groups were)."""
    if "group" not in scores:
        return None
    g = scores if splits is None else scores[scores["split"].isin(splits)]
    return g.sort_values(["split", "pair_id"])["group"].tolist()


def accuracy_block(scores: pd.DataFrame, n_boot: int, seed: int) -> dict:
    out = {}
    ood = scores[scores["split"] != "source_test"]
    parts = list(scores.groupby("split", sort=False)) + ([("ood", ood)] if len(ood) else [])
    for split, g in parts:
        c = per_pair_correct(g["r_chosen"].to_numpy(), g["r_rejected"].to_numpy())
        groups = g["group"].tolist() if "group" in g else None
        iv = bootstrap_accuracy_ci(c, n_boot=n_boot, seed=seed, groups=groups)
        out[split] = {"point": float(iv[0]), "lo": float(iv[1]), "hi": float(iv[2]), "n": len(c),
                      "bootstrap": bootstrap_kind(groups)}
    return out


def _cue_entry(row: dict) -> dict:
    """One cue's entry of the ``cues`` block from a `cues.cue_reliance` row (NaN -> None)."""
    row = {k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in row.items()}

    def iv(key: str, n: int) -> dict:
        return {"n": n, "point": row[key], "lo": row[f"{key}_lo"], "hi": row[f"{key}_hi"]}

    return {"n": row["n"], "agree": iv("agree_acc", row["agree_n"]),
            "disagree": iv("disagree_acc", row["disagree_n"]), "follow": iv("follow", row["n"]),
            "interval": row["interval"]}


def cue_block(scores: pd.DataFrame, data: dict[str, pd.DataFrame], n_boot: int, seed: int,
              cues: list[str] | None = None) -> dict:
    """The ``cues`` block of a run's ``metrics.json``: per evaluated split (``source_test``,
    each ``target_test:<name>`` and ``ood``, the targets pooled), per cue
    (`anchorviz.analysis.cues`; default every registered cue), how the run's scores go along
    with the cue: ``n`` (pairs where the cue picks a side), ``agree`` / ``disagree`` (accuracy,
    with ``n``, on the pairs where the cue's side is the chosen / the rejected response) and
    ``follow`` (share of the cue's pairs where the model prefers the cue's side), each with a
    95% interval (bootstrap over the scores' ``group``: prompts; ``interval`` says which kind).

    ``data``: the splits' pair tables as the model read them (the texts decide the sides)."""
    parts: dict[str, tuple[pd.DataFrame, np.ndarray, list | None]] = {}
    for split, g in scores.groupby("split", sort=False):
        if split not in data:
            raise ValueError(f"scores hold split {split!r} but the pair data has only "
                             f"{sorted(data)}")
        sides = cue_sides(data[split], cues)
        sides["pair_id"] = sides["pair_id"].astype(str)
        ids = g["pair_id"].astype(str)
        missing = sorted(set(ids) - set(sides["pair_id"]))
        if missing:
            raise ValueError(f"split {split}: {len(missing)} scored pair(s) are not in its pair "
                             f"data, e.g. {missing[:3]} (the data changed since the run?)")
        sides = sides.set_index("pair_id").loc[ids].reset_index()
        margin = (g["r_chosen"] - g["r_rejected"]).to_numpy(dtype=np.float64)
        parts[split] = (sides, margin, g["group"].tolist() if "group" in g else None)
    targets = [s for s in parts if s != "source_test"]
    if targets:
        pooled = [parts[t] for t in targets]
        groups = (None if any(p[2] is None for p in pooled)
                  else [x for p in pooled for x in p[2]])
        parts["ood"] = (pd.concat([p[0] for p in pooled], ignore_index=True),
                        np.concatenate([p[1] for p in pooled]), groups)
    out = {}
    for split, (sides, margin, groups) in parts.items():
        table = cue_reliance(sides, margin, groups="prompt" if groups is None else groups,
                             n_boot=n_boot, seed=seed)
        out[split] = {r["cue"]: _cue_entry(r) for r in table.to_dict("records")}
    return out


def cue_follow_columns(block: dict) -> dict[str, float]:
    """The results table's cue columns from a ``cues`` block: ``follow_<cue>_source`` and
    ``follow_<cue>_target`` (the targets pooled), for the cues that pick a side there."""
    out = {}
    for split, name in (("source_test", "source"), ("ood", "target")):
        for cue, b in (block.get(split) or {}).items():
            if b.get("n"):
                out[f"follow_{cue}_{name}"] = b["follow"]["point"]
    return out


def _correct(scores: pd.DataFrame, splits: list[str] | None) -> np.ndarray:
    g = scores if splits is None else scores[scores["split"].isin(splits)]
    g = g.sort_values(["split", "pair_id"])
    return per_pair_correct(g["r_chosen"].to_numpy(), g["r_rejected"].to_numpy())


def transfer_block(student: pd.DataFrame, teacher: pd.DataFrame, ceiling: pd.DataFrame | None,
                    n_boot: int, seed: int, only_ood: bool = False) -> dict:
    targets = sorted(s for s in student["split"].unique() if s != "source_test")
    out = {}
    per_target = [] if only_ood else [(t, [t]) for t in targets]
    for name, tsplits in [("ood", targets)] + per_target:
        res = paired_bootstrap_transfer(
            _correct(teacher, ["source_test"]), _correct(student, ["source_test"]),
            _correct(teacher, tsplits), _correct(student, tsplits),
            ceiling_correct_id=None if ceiling is None else _correct(ceiling, ["source_test"]),
            ceiling_correct_ood=None if ceiling is None else _correct(ceiling, tsplits),
            n_boot=n_boot, seed=seed, groups_id=_groups(student, ["source_test"]),
            groups_ood=_groups(student, tsplits))
        out[name] = {k: (None if v is None else {"point": float(v[0]), "lo": float(v[1]),
                                                 "hi": float(v[2])}) for k, v in res.items()}
    return out


def label_stats(q: np.ndarray) -> dict:
    conf = np.maximum(q, 1 - q)
    hist, edges = np.histogram(q, bins=10, range=(0, 1))
    return {"q_mean": float(q.mean()), "q_confidence": float(conf.mean()),
            "q_hist": hist.tolist(), "q_edges": edges.tolist(),
            "frac_confident_0.7": float((conf >= 0.7).mean())}


def results_table(out_dir: str | Path) -> pd.DataFrame:
    """One row per finished run (columns: docs/ARCHITECTURE.md), always rebuilt from the run
    folders; written as parquet and CSV (removed when no run can be read).

    Run folders that cannot be read (not finished, failed, corrupted, unparseable) are left
    out, logged, and listed in ``df.attrs["unreadable"]`` (``{run id: why}``). Runs of
    different base configs in one folder (another lr, split size, model ...) get ``cfg.<key>``
    columns holding the settings that tell them apart (`base_config_columns`)."""
    store = RunStore(out_dir)
    rows, keys = [], []
    finished, unreadable = store.scan()
    for run_id in finished:
        d = store.run_dir(run_id)
        try:
            m = json.loads((d / "metrics.json").read_text())
            key = read_yaml(d / "config.yaml")
            rows.append(_result_row(run_id, key, m, d))
            keys.append(key)
        except Exception as err:  # verified, but not readable by this version of the code
            unreadable[run_id] = f"{type(err).__name__}: {err}"
    for run_id, why in unreadable.items():
        logger.warning("results table of %s: run %s left out (%s)", out_dir, run_id, why)
    df = pd.DataFrame(rows)
    sort = ["artifact_strength", "seed", "kind", "method", "anchor_lambda", "anchor_layers"]
    if len(df):
        extra = base_config_columns(keys)
        if extra:
            logger.warning("results table of %s: runs of %d different base configs; the columns "
                           "%s tell them apart", out_dir,
                           len({tuple(v) for v in zip(*extra.values())}), sorted(extra))
            for col, values in extra.items():
                df[col] = values
            sort = sorted(extra) + sort
        df = df.sort_values(sort).reset_index(drop=True)
        write_atomic(Path(out_dir) / "results.parquet", df.to_parquet)
        write_atomic(Path(out_dir) / "results.csv", lambda tmp: df.to_csv(tmp, index=False))
    else:  # a table left by an earlier call must not outlive the runs it listed
        for name in ("results.parquet", "results.csv"):
            (Path(out_dir) / name).unlink(missing_ok=True)
    df.attrs["unreadable"] = dict(unreadable)
    return df


# dotted run-key settings that a sweep's grid varies (they have their own table columns)
# (``capture.enabled`` is set by the grid too: off on seeds outside ``detail_seeds``, which
# are scored exactly as a captured run is, so it never tells two conditions apart)
_GRID_SETTINGS = {"kind", "seed", "method.name", "method.anchor_lambda", "method.anchor_layers",
                  "data.artifact_strength", "data.artifact_teacher_visibility", "capture.enabled"}


def _base_settings(key: dict) -> dict[str, str]:
    """A run key flattened to ``{dotted setting: JSON value}`` without the grid's dimensions;
    with ``data.split_per_seed`` the split seed is given as the base's (``split_seed - seed``)."""
    flat: dict[str, str] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
            return
        rel = prefix[len("teacher."):] if prefix.startswith("teacher.") else prefix
        if rel not in _GRID_SETTINGS:
            flat[prefix] = json.dumps(value, sort_keys=True, default=str)

    walk("", key)
    for pre in ("", "teacher."):
        data = key.get("teacher", {}).get("data") if pre else key.get("data")
        seed = key.get("teacher", {}).get("seed") if pre else key.get("seed")
        if isinstance(data, dict) and data.get("split_per_seed") and isinstance(seed, int):
            flat[f"{pre}data.split_seed"] = json.dumps(data.get("split_seed", 0) - seed)
    return flat


def base_config_columns(keys: list[dict]) -> dict[str, list[str | None]]:
    """``{"cfg.<setting>": value per run}`` for every setting (other than the grid's: seed,
    method, lambda, layers, artefact strength) that differs between runs of the same kind and
    method, i.e. between base configs; ``{}`` when one base config made every run. Values are
    JSON text (None where a run's key lacks the setting, e.g. one made by older code)."""
    flats = [_base_settings(k) for k in keys]
    groups: dict[tuple, list[int]] = {}
    for i, k in enumerate(keys):
        meth = (k.get("method") or {}).get("name") if isinstance(k.get("method"), dict) else None
        groups.setdefault((k.get("kind"), meth), []).append(i)
    differ: set[str] = set()
    for idx in groups.values():
        names = set().union(*(flats[i] for i in idx))
        differ |= {n for n in names if len({flats[i].get(n) for i in idx}) > 1}
    return {f"cfg.{n}": [f.get(n) for f in flats] for n in sorted(differ)}


def artifact_columns(df: pd.DataFrame, pair_ids: list) -> dict[str, list]:
    """Per scored pair, from the split's ``meta``: ``artifact_side`` (the side carrying the planted
    artefact, "chosen" / "rejected", or None) and ``artifact_seen`` (whether the teacher's copy
    carried it: True / False, None without an artefact). Stored in ``scores.parquet`` so that
    reading a run's marked / clean accuracy never rebuilds its data."""
    meta = dict(zip(df["pair_id"], df["meta"])) if "meta" in df else {}
    side = [(meta.get(p) or {}).get("artifact_side") for p in pair_ids]
    seen = [(meta.get(p) or {}).get("artifact_teacher_visible") if s else None
            for p, s in zip(pair_ids, side)]
    return {"artifact_side": side, "artifact_seen": pd.array(seen, dtype="boolean")}


def artifact_accuracy(run_dir: str | Path) -> dict[str, tuple[float, int]]:
    """ID (``source_test``) accuracy of a finished run split by whether the pair carries the
    planted artefact: ``{"marked": (acc, n), "clean": (acc, n)}``; ``{}`` without an artefact.

    A pure function of the run folder: ``scores.parquet`` holds the rewards and, for runs made
    since 2026-12-04, each pair's artefact side and whether the teacher saw it (`artifact_columns`);
    for older runs ``config.yaml`` rebuilds the split deterministically. ``clean`` accuracy is
    the skill the targets can use; a model whose ID accuracy rests on the shortcut is high on
    ``marked`` and low on ``clean``."""
    run_dir = Path(run_dir)
    data = dict(read_yaml(run_dir / "config.yaml")["data"])
    if data.get("artifact_kind", "none") == "none" or not data.get("artifact_strength"):
        return {}
    scores = pd.read_parquet(run_dir / "scores.parquet")
    scores = scores[scores["split"] == "source_test"]
    if "artifact_side" not in scores:  # a run stored before the columns existed: rebuild them
        if data.pop("split_protocol", None) != SPLIT_PROTOCOL:
            logger.warning("%s was made with an older split protocol: its marked / clean split "
                           "cannot be rebuilt", run_dir)
            return {}
        src = prepare_data(DataConfig(**data))["source_test"]
        scores = scores.assign(**artifact_columns(src, list(scores["pair_id"])))
    side = {p: (v if isinstance(v, str) else None)  # a missing side reads back as None / NaN
            for p, v in zip(scores["pair_id"], scores["artifact_side"])}
    seen = {p: (None if pd.isna(v) else bool(v))
            for p, v in zip(scores["pair_id"], scores["artifact_seen"])}
    correct = per_pair_correct(scores["r_chosen"].to_numpy(), scores["r_rejected"].to_numpy())
    groups = ["marked" if side.get(p) else "clean" for p in scores["pair_id"]]
    out = accuracy_by_group(correct, groups)
    if any(v is False for v in seen.values()):  # the teacher reads only some of the cues
        marked = np.array([side.get(p) is not None for p in scores["pair_id"]])
        vis = ["seen" if seen.get(p) else "hidden" for p in scores["pair_id"][marked]]
        out.update(accuracy_by_group(correct[marked], vis))
    return out


def run_cues(run_dir: str | Path, cues: list[str] | None = None) -> dict:
    """The ``cues`` block (`cue_block`) of a finished run, from its stored ``scores.parquet``
    and its splits' pair texts, rebuilt from ``config.yaml`` as `artifact_accuracy` rebuilds
    them (a teacher reads its own view, `prepare.teacher_data`); nothing is retrained. For runs
    made before metrics.json held the block, or with other cues. Bootstrap resamples and seed
    are the run's (``capture.n_boot``, default 1000; ``seed``)."""
    run_dir = Path(run_dir)
    key = read_yaml(run_dir / "config.yaml")
    data = dict(key["data"])
    protocol = data.pop("split_protocol", None)
    if protocol != SPLIT_PROTOCOL:
        raise ValueError(f"{run_dir}: made with split protocol {protocol!r}, this code makes "
                         f"protocol {SPLIT_PROTOCOL}: its pairs cannot be rebuilt")
    splits = prepare_data(DataConfig(**data))
    if key.get("kind") == "teacher":
        splits = teacher_data(splits, data.get("artifact_teacher_form", "same"))
    scores = pd.read_parquet(run_dir / "scores.parquet")
    n_boot = int((key.get("capture") or {}).get("n_boot", 1000))
    return cue_block(scores, splits, n_boot=n_boot, seed=int(key.get("seed", 0)), cues=cues)


def pgr_from_runs(student_dir: Path, ceiling_dir: Path, teacher_dir: Path, n_boot: int = 1000,
                  seed: int = 0) -> dict | None:
    """PGR on the ID split (``{"point", "lo", "hi"}``, paired bootstrap) from the stored scores of
    a student, its gold ceiling and its teacher; None when the ceiling has not finished or PGR
    is undefined (ceiling and teacher equally accurate)."""
    paths = [Path(d) / "scores.parquet" for d in (teacher_dir, student_dir, ceiling_dir)]
    try:
        finished = json.loads((Path(ceiling_dir) / "MANIFEST.json").read_text()).get("status")
    except (OSError, ValueError, AttributeError):
        finished = None
    if finished != "finished" or not all(p.is_file() for p in paths):
        return None
    teacher, student, ceiling = (pd.read_parquet(p) for p in paths)
    block = transfer_block(student, teacher, ceiling, n_boot, seed, only_ood=True)["ood"]
    return block.get("pgr")


def drift_columns(dt: pd.DataFrame) -> dict[str, float]:
    """The results table's drift columns from a run's ``drift.parquet`` table: last layer,
    source test vs the mean over targets, for the uncentred cosine and biased CKA, and (where
    the run has them; older runs lack them) the reference-centred cosine (not dominated by a
    few huge dimensions), the standardised cosine and debiased CKA (biased CKA is inflated when
    rows are few next to the width)."""
    last = dt[dt["layer"] == dt["layer"].max()]
    src, tgt = last[last["split"] == "source_test"], last[last["split"] != "source_test"]
    out = {}
    for col, name in (("cosine_mean", "drift_cos"), ("cka", "drift_cka"),
                      ("cosine_centred_mean", "drift_cos_centred"),
                      ("cosine_standardised_mean", "drift_cos_std"),
                      ("cka_debiased", "drift_cka_debiased")):
        if col in dt:
            out[f"{name}_source"] = float(src[col].mean())
            out[f"{name}_target"] = float(tgt[col].mean())
    return out


def _result_row(run_id: str, key: dict, m: dict, run_dir: Path) -> dict:
    data = key["data"]
    meth = key.get("method", {})
    row: dict[str, Any] = {
        "run_id": run_id, "kind": key["kind"], "method": m["method"],
        "anchor_lambda": float(meth.get("anchor_lambda") or 0.0),
        "anchor_layers": meth.get("anchor_layers") or "",
        "seed": key["seed"], "artifact_kind": data["artifact_kind"],
        "artifact_strength": float(data["artifact_strength"]),
        "teacher_visibility": float(data.get("artifact_teacher_visibility", 1.0)),
        "split_per_seed": bool(data.get("split_per_seed", False)),
        "source": dataset_label(data["source"]),
        "targets": ",".join(target_name(t) for t in data["targets"]),
        "model": m.get("model"),
        # hidden states captured (drift, projection): False for a scores-only run (a sweep's
        # verdict-only seed); teachers never capture
        "captured": key["kind"] != "teacher" and (key.get("capture") or {}).get("enabled", True),
    }
    acc = m["accuracy"]
    for name, block in acc.items():
        col = {"source_test": "acc_id", "ood": "acc_ood"}.get(name, "acc_" + name.split(":", 1)[-1])
        row[col], row[col + "_lo"], row[col + "_hi"] = block["point"], block["lo"], block["hi"]
    tr = dict(m.get("transfer", {}).get("ood", {}))
    if tr.get("pgr") is None and m.get("ceiling_run"):
        tr["pgr"] = pgr_from_runs(run_dir, run_dir.parent / m["ceiling_run"],
                                  run_dir.parent / m["teacher_run"],
                                  n_boot=int(key.get("capture", {}).get("n_boot", 1000)),
                                  seed=int(key["seed"]))
    for k in ("wrg", "aog", "nts", "pgr"):
        b = tr.get(k)
        row[k], row[k + "_lo"], row[k + "_hi"] = ((b["point"], b["lo"], b["hi"]) if b else
                                                  (np.nan, np.nan, np.nan))
    # per target: AOG and NTS with their paired-bootstrap intervals (a pooled OOD number can
    # hide opposite moves on two targets); WRG is an ID quantity, the same for every target
    for t, block in m.get("transfer", {}).items():
        name = t.split(":", 1)[-1]
        for k in ("aog", "nts"):
            if t != "ood" and block.get(k):
                row[f"{k}_{name}"] = block[k]["point"]
                row[f"{k}_{name}_lo"], row[f"{k}_{name}_hi"] = block[k]["lo"], block[k]["hi"]
    drift = run_dir / "drift.parquet"
    if drift.is_file():
        row.update(drift_columns(pd.read_parquet(drift)))
    lab = m.get("labels") or m.get("labels_raw") or {}
    row["q_mean"] = lab.get("q_mean", np.nan)
    row["q_confidence"] = lab.get("q_confidence", np.nan)
    row["acc_val"] = m.get("acc_val", np.nan)
    row["seconds"] = m.get("seconds", np.nan)
    if (run_dir / "scores.parquet").is_file():
        for group, (acc, _) in artifact_accuracy(run_dir).items():
            row[f"acc_id_{group}"] = acc
    row.update(cue_follow_columns(m.get("cues") or {}))
    return row


def results_text(df: pd.DataFrame) -> str:
    """The results table as the command line prints it: the main columns, accuracies and
    transfer scores in points, drift and confidence to 3 decimals."""
    cols = ["method", "anchor_lambda", "anchor_layers", "seed", "acc_id", "acc_id_clean",
            "acc_id_hidden", "acc_ood", "wrg", "aog", "nts", "drift_cos_target",
            "drift_cos_centred_target", "q_confidence"]
    cols = [c for c in cols if c in df.columns]
    t = df[cols].copy()
    for c in ("acc_id", "acc_id_clean", "acc_id_hidden", "acc_ood", "wrg", "aog", "nts"):
        if c in t:
            t[c] = (100 * t[c]).round(1)
    for c in ("drift_cos_target", "drift_cos_centred_target", "q_confidence"):
        if c in t:
            t[c] = t[c].round(3)
    return t.to_string(index=False, na_rep="-")
