"""A small synthetic sweep directory in exactly the documented layout (docs/ARCHITECTURE.md).

Plots and widgets are pure functions of a sweep directory, so their tests need one that is fast
to make and whose numbers are known. :func:`write_fake_sweep` writes plausible random numbers
(fixed seeds) for a weak teacher, a gold ceiling, naive and confidence students and ANCHOR
students over a lambda x layers grid, for every seed (and artefact strength, and teacher
visibility of the artefact):

    <root>/sweep.yaml, results.parquet, results.csv
    <root>/runs/<run_id>/config.yaml, MANIFEST.json, metrics.json, scores.parquet,
                         history.parquet, labels.parquet (teacher: pair_id, margin;
                         students: pair_id, q), drift.parquet, projection.parquet

File contents follow what the pipeline (``anchorviz.pipeline``) writes: splits ``source_test`` and
``target_test:<name>``, ``domain`` = the dataset's domain label, accuracies as fractions.
The numbers tell the paper's story (naive students drift and lose OOD accuracy, moderate
anchoring keeps the representation and the OOD accuracy, strong anchoring costs ID accuracy),
so a figure that looks wrong on them is probably wrong.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from anchorviz.pipeline.results import drift_columns

SOURCE = "vader-movie"
SOURCE_DOMAIN = "movie"
N_LAYERS = 6  # blocks; layer 0 is the embedding output, so drift has layers 0..6


def _hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _scores(rng: np.random.Generator, splits: dict[str, str], acc: dict[str, float],
            n_pairs: int) -> pd.DataFrame:
    """Per-pair rewards whose pairwise accuracy on each split is exactly ``round(acc * n) / n``."""
    rows = []
    for split, domain in splits.items():
        k = int(round(acc[split] * n_pairs))
        correct = np.zeros(n_pairs, dtype=bool)
        correct[rng.choice(n_pairs, size=k, replace=False)] = True
        r_chosen = rng.normal(0.0, 1.0, n_pairs)
        gap = np.abs(rng.normal(0.6, 0.4, n_pairs)) + 1e-3
        r_rejected = np.where(correct, r_chosen - gap, r_chosen + gap)
        rows.append(pd.DataFrame({
            "split": split, "domain": domain,
            "pair_id": [f"{domain}-{i}" for i in range(n_pairs)],
            "r_chosen": r_chosen, "r_rejected": r_rejected,
        }))
    return pd.concat(rows, ignore_index=True)


def _accuracy_block(scores: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Accuracy with a normal-approximation interval per split and over all targets ("ood")."""
    out = {}
    groups = list(scores.groupby("split", sort=False))
    groups.append(("ood", scores[scores["split"] != "source_test"]))
    for name, g in groups:
        c = (g["r_chosen"] > g["r_rejected"]).to_numpy(dtype=float)
        p = float(c.mean())
        half = 1.96 * math.sqrt(max(p * (1 - p), 1e-4) / len(c))
        out[name] = {"point": p, "lo": max(0.0, p - half), "hi": min(1.0, p + half), "n": len(c)}
    return out


def _drift(rng: np.random.Generator, splits: dict[str, str], strength: float,
           middle_anchor: float) -> pd.DataFrame:
    """Drift per (split, layer): grows with depth and with ``strength`` (1 = a naive student).

    ``middle_anchor`` in [0, 1] pulls the middle layers back (middle-layer ANCHOR)."""
    rows = []
    for i, (split, domain) in enumerate(splits.items()):
        domain_factor = 1.0 if split == "source_test" else 1.25 + 0.15 * i
        for layer in range(N_LAYERS + 1):
            depth = layer / N_LAYERS
            shape = depth ** 1.5
            if middle_anchor:
                shape *= 1.0 - middle_anchor * math.exp(-((depth - 0.6) ** 2) / 0.05)
            d = strength * domain_factor * (0.02 + shape) * (1 + 0.05 * rng.normal())
            cos = float(np.clip(0.35 * d, 1e-4, 0.95))
            cka = float(np.clip(1.0 - 0.55 * d, 0.02, 0.9999))
            rows.append({
                "split": split, "domain": domain, "layer": layer, "cka": cka,
                "cka_debiased": float(np.clip(cka - 0.03 * d, 0.0, 1.0)),
                "cosine_mean": cos, "cosine_median": 0.9 * cos, "cosine_p90": min(0.99, 1.8 * cos),
                "cosine_centred_mean": min(0.99, 1.2 * cos),
                "n_rows": 0,  # filled below
            })
    return pd.DataFrame(rows)


def _reference_map(rng: np.random.Generator, splits: dict[str, str], n_pairs: int) -> pd.DataFrame:
    """Reference coordinates of every (split, pair, side): one cluster per domain."""
    rows = []
    for i, (split, domain) in enumerate(splits.items()):
        centre = np.array([4.0 * math.cos(2.1 * i), 4.0 * math.sin(2.1 * i)])
        for side_i, side in enumerate(("chosen", "rejected")):
            xy = centre + np.array([0.8 * (side_i - 0.5), 0.0]) + rng.normal(0, 0.9, (n_pairs, 2))
            rows.append(pd.DataFrame({
                "split": split, "domain": domain,
                "pair_id": [f"{domain}-{j}" for j in range(n_pairs)], "side": side,
                "x": xy[:, 0], "y": xy[:, 1],
            }))
    return pd.concat(rows, ignore_index=True)


def _projection(rng: np.random.Generator, ref_maps: dict[int, pd.DataFrame],
                strength: float) -> pd.DataFrame:
    """Reference and student rows per projection layer: the student moves by ``strength``."""
    out = []
    for layer, ref in ref_maps.items():
        stu = ref.copy()
        shift = strength * (2.5 if layer == max(ref_maps) else 1.2)
        stu["x"] = ref["x"] + shift + rng.normal(0, 0.3 * strength + 0.01, len(ref))
        stu["y"] = ref["y"] - 0.5 * shift + rng.normal(0, 0.3 * strength + 0.01, len(ref))
        for model, t in (("reference", ref), ("student", stu)):
            t = t.copy()
            t.insert(0, "model", model)
            t.insert(1, "layer", layer)
            out.append(t)
    cols = ["model", "layer", "split", "domain", "pair_id", "side", "x", "y"]
    return pd.concat(out, ignore_index=True)[cols]


def _method_effect(method: str, lam: float, layers: str) -> tuple[float, float, float, float]:
    """(drift strength, ID delta, OOD delta vs naive, middle-anchor) of one student method."""
    if method == "naive":
        return 1.0, 0.0, 0.0, 0.0
    if method == "confidence":
        return 0.9, -0.005, 0.01, 0.0
    if method == "seam":
        return 0.5, -0.08, 0.05, 0.0
    # anchor: drift shrinks with lambda; OOD gains peak at a moderate lambda; ID pays for strength
    strength = 1.0 / (1.0 + 8.0 * lam)
    peak = math.exp(-((math.log10(lam) + 1.0) ** 2) / 1.5)
    id_delta = -0.06 * (lam / (lam + 0.5))
    if layers == "middle":
        return min(1.0, strength * 1.15), id_delta * 0.6, 0.045 * peak, 0.6
    return strength, id_delta, 0.07 * peak, 0.0


def write_fake_sweep(
    root: str | Path,
    *,
    seeds: Sequence[int] = (0, 1),
    lambdas: Sequence[float] = (0.01, 0.1, 1.0),
    layers: Sequence[str] = ("last", "middle"),
    targets: Sequence[str] = ("amazon", "nyt"),
    methods: Sequence[str] = ("naive", "confidence", "anchor"),
    artifact_strengths: Sequence[float] = (0.0,),
    artifact_kind: str = "none",
    n_pairs: int = 60,
    projection_layers: Sequence[int] = (3, N_LAYERS),
    seed: int = 0,
    data_settings: dict[str, Any] | None = None,
    teacher_visibilities: Sequence[float] = (1.0,),
    methods_by_visibility: dict[float, Sequence[str]] | None = None,
) -> Path:
    """Write a synthetic sweep directory at ``root`` and return its path.

    Runs: per (artefact strength, seed) one teacher, one ceiling, and one student per method
    (ANCHOR: per lambda x layers). ``n_pairs`` pairs per test split; drift for layers 0..6;
    projection coordinates for ``projection_layers``. ``data_settings`` (e.g. split sizes
    ``{"source_test": 150, ...}``) are added to the ``data`` block of every run's config.yaml.

    ``teacher_visibilities``: the fraction of planted artefacts the weak teacher can read
    (``data.artifact_teacher_visibility``, left out of the key at 1 as the real run keys do);
    each value is a full condition. With an artefact, the rows carry ``acc_id_marked`` /
    ``acc_id_clean`` and, below visibility 1, ``acc_id_seen`` / ``acc_id_hidden``: the teacher
    is right on the markers it reads, a student applies the marker to the hidden ones too.
    ``methods_by_visibility`` trains only these methods at a visibility (a partial grid).
    """
    root = Path(root)
    (root / "runs").mkdir(parents=True, exist_ok=True)
    splits = {"source_test": SOURCE_DOMAIN, **{f"target_test:{t}": t for t in targets}}
    target_splits = [s for s in splits if s != "source_test"]
    rows: list[dict[str, Any]] = []

    teacher_acc = {"source_test": 0.72, **{s: 0.74 - 0.03 * i for i, s in enumerate(target_splits)}}
    ceiling_acc = {"source_test": 0.81, **{s: 0.79 - 0.03 * i for i, s in enumerate(target_splits)}}

    for strength, vis in [(a, v) for a in artifact_strengths for v in teacher_visibilities]:
        vis_methods = (methods_by_visibility or {}).get(vis, methods)
        for s in seeds:
            ref_maps = {
                layer: _reference_map(np.random.default_rng([seed, s, layer]), splits, n_pairs)
                for layer in projection_layers
            }
            noise = np.random.default_rng([seed, s, int(strength * 100)]
                                          + ([] if vis == 1.0 else [int(vis * 100)]))
            jitter = noise.normal(0, 0.012)
            data = {"source": SOURCE, "targets": [f"vader-{t}" for t in targets],
                    "artifact_kind": artifact_kind, "artifact_strength": float(strength),
                    **(data_settings or {})}
            if vis != 1.0:
                data["artifact_teacher_visibility"] = float(vis)
            teacher_key = {"kind": "teacher", "data": data, "model": "minilm-l3", "seed": s}
            runs: list[tuple[dict[str, Any], dict[str, float], float, float]] = [
                (teacher_key, {k: v + jitter for k, v in teacher_acc.items()}, 0.0, 0.0),
                ({"kind": "ceiling", "data": data, "model": "minilm-l6", "seed": s},
                 {k: v + jitter for k, v in ceiling_acc.items()}, 0.7, 0.0),
            ]
            # the artefact hurts a naive student OOD; the drift grows with it
            art = 1.0 + strength
            naive_acc = {"source_test": 0.76 + 0.02 * strength + jitter,
                         **{t: teacher_acc[t] - 0.02 - 0.06 * strength + jitter
                            for t in target_splits}}
            grid = []
            for m in vis_methods:
                grid += ([(m, lam, lay) for lay in layers for lam in lambdas] if m == "anchor"
                         else [(m, 0.0, "")])
            for m, lam, lay in grid:
                drift_strength, d_id, d_ood, mid = _method_effect(m, lam, lay)
                acc = {k: v + (d_id if k == "source_test" else d_ood * art)
                       for k, v in naive_acc.items()}
                key = {"kind": "student", "data": data, "model": "minilm-l6", "seed": s,
                       "method": {"name": m, "anchor_lambda": lam, "anchor_layers": lay},
                       "teacher": teacher_key}
                runs.append((key, acc, drift_strength * art, mid))

            written: dict[str, dict[str, Any]] = {}
            for key, acc, drift_strength, mid in runs:
                kind = key["kind"]
                method = key["method"]["name"] if kind == "student" else kind
                run_id = f"{method}-{_hash(key)}"
                run_rng = np.random.default_rng([seed, int(_hash(key)[:8], 16)])
                written[run_id] = _write_run(root / "runs" / run_id, run_rng, key, kind, method,
                                             acc, splits, n_pairs, drift_strength, mid, ref_maps)
                written[run_id]["run_id"] = run_id
            teacher = next(r for r in written.values() if r["kind"] == "teacher")
            ceiling = next(r for r in written.values() if r["kind"] == "ceiling")
            for r in written.values():
                rows.append(_result_row(r, teacher, ceiling, targets, data))
                if artifact_kind != "none" and strength > 0:
                    rows[-1].update(_artifact_split(r, vis, noise))

    results = pd.DataFrame(rows)
    results = results.sort_values(["artifact_strength", "teacher_visibility", "seed", "kind",
                                   "method", "anchor_lambda", "anchor_layers"]
                                  ).reset_index(drop=True)
    results.to_parquet(root / "results.parquet")
    results.to_csv(root / "results.csv", index=False)
    (root / "sweep.yaml").write_text(yaml.safe_dump({
        "base": {"data": {"source": SOURCE, "targets": [f"vader-{t}" for t in targets],
                          "artifact_kind": artifact_kind}},
        "grid": {"methods": list(methods), "anchor_lambdas": list(lambdas),
                 "anchor_layers": list(layers), "seeds": list(seeds),
                 "artifact_strengths": list(artifact_strengths),
                 "teacher_visibilities": list(teacher_visibilities)},
    }))
    return root


def _write_run(run_dir: Path, rng: np.random.Generator, key: dict[str, Any], kind: str,
               method: str, acc: dict[str, float], splits: dict[str, str], n_pairs: int,
               drift_strength: float, middle_anchor: float,
               ref_maps: dict[int, pd.DataFrame]) -> dict[str, Any]:
    """One run directory; returns what its results row needs."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(key))
    acc = {k: float(np.clip(v + rng.normal(0, 0.015), 0.05, 0.95)) for k, v in acc.items()}
    scores = _scores(rng, splits, acc, n_pairs)
    scores.to_parquet(run_dir / "scores.parquet")
    steps = np.arange(1, 21)
    fit = 0.69 - 0.1 * (1 - np.exp(-steps / 8)) + rng.normal(0, 0.005, steps.size)
    anchor = (0.02 * (1 - np.exp(-steps / 5)) if method == "anchor" else np.zeros(steps.size))
    pd.DataFrame({"step": steps, "fit": fit, "anchor": anchor, "total": fit + anchor,
                  "lr": 5e-5 * (1 - steps / 21), "grad_norm": np.abs(rng.normal(1, 0.2, steps.size))}
                 ).to_parquet(run_dir / "history.parquet")
    metrics: dict[str, Any] = {"kind": kind, "method": method, "model": key["model"],
                               "accuracy": _accuracy_block(scores), "seconds": float(rng.uniform(5, 50))}
    q = None
    if kind == "teacher":
        margin = rng.normal(0.35, 0.6, 4 * n_pairs)
        pd.DataFrame({"pair_id": [f"w2s-{i}" for i in range(margin.size)], "margin": margin}
                     ).to_parquet(run_dir / "labels.parquet")
        q = 1 / (1 + np.exp(-margin))
        metrics["labels_raw"] = {"q_mean": float(q.mean()),
                                 "q_confidence": float(np.maximum(q, 1 - q).mean())}
    else:
        if kind == "student":
            margin = rng.normal(0.35, 0.6, 4 * n_pairs)
            q = 1 / (1 + np.exp(-margin))
            pd.DataFrame({"pair_id": [f"w2s-{i}" for i in range(q.size)], "q": q}
                         ).to_parquet(run_dir / "labels.parquet")
            metrics["labels"] = {"q_mean": float(q.mean()),
                                 "q_confidence": float(np.maximum(q, 1 - q).mean())}
        drift = _drift(rng, splits, drift_strength, middle_anchor)
        drift["n_rows"] = 2 * n_pairs
        drift.to_parquet(run_dir / "drift.parquet")
        _projection(rng, ref_maps, drift_strength).to_parquet(run_dir / "projection.parquet")
    (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=1))
    files = {p.relative_to(run_dir).as_posix(): _sha256(p)
             for p in sorted(run_dir.rglob("*")) if p.is_file() and p.name != "MANIFEST.json"}
    (run_dir / "MANIFEST.json").write_text(json.dumps(
        {"status": "finished", "config_hash": _hash(key), "files": files}, indent=1))
    return {"kind": kind, "method": method, "key": key, "accuracy": metrics["accuracy"],
            "run_dir": run_dir, "q": q}


def _result_row(r: dict[str, Any], teacher: dict[str, Any], ceiling: dict[str, Any],
                targets: Sequence[str], data: dict[str, Any]) -> dict[str, Any]:
    """The results.parquet row of one run (columns: docs/ARCHITECTURE.md)."""
    meth = r["key"].get("method", {})
    row: dict[str, Any] = {
        "run_id": r["run_id"], "kind": r["kind"], "method": r["method"],
        "anchor_lambda": float(meth.get("anchor_lambda") or 0.0),
        "anchor_layers": meth.get("anchor_layers") or "",
        "seed": r["key"]["seed"], "artifact_kind": data["artifact_kind"],
        "artifact_strength": data["artifact_strength"],
        "teacher_visibility": float(data.get("artifact_teacher_visibility", 1.0)),
        "source": data["source"],
        "targets": ",".join(targets), "model": r["key"]["model"],
    }
    for name, block in r["accuracy"].items():
        col = {"source_test": "acc_id", "ood": "acc_ood"}.get(name, "acc_" + name.split(":", 1)[-1])
        row[col], row[col + "_lo"], row[col + "_hi"] = block["point"], block["lo"], block["hi"]
    acc, tacc = r["accuracy"], teacher["accuracy"]
    if r["kind"] == "teacher":
        for k in ("wrg", "aog", "nts", "pgr"):
            row[k] = row[k + "_lo"] = row[k + "_hi"] = np.nan
    else:
        wrg = acc["source_test"]["point"] - tacc["source_test"]["point"]
        aog = acc["ood"]["point"] - tacc["ood"]["point"]
        nts = aog - max(0.0, -wrg)
        gap = ceiling["accuracy"]["source_test"]["point"] - tacc["source_test"]["point"]
        pgr = wrg / gap if r["kind"] == "student" and gap > 0 else np.nan
        for k, v in (("wrg", wrg), ("aog", aog), ("nts", nts), ("pgr", pgr)):
            row[k], row[k + "_lo"], row[k + "_hi"] = v, v - 0.04, v + 0.04
        for t in targets:
            split = f"target_test:{t}"
            row["aog_" + t] = acc[split]["point"] - tacc[split]["point"]
    drift_path = r["run_dir"] / "drift.parquet"
    if drift_path.is_file():
        row.update(drift_columns(pd.read_parquet(drift_path)))  # the real results writer's
    else:
        for c in ("drift_cos_source", "drift_cos_target", "drift_cka_source", "drift_cka_target"):
            row[c] = np.nan
    q = r["q"]
    row["q_mean"] = float(q.mean()) if q is not None else np.nan
    row["q_confidence"] = float(np.maximum(q, 1 - q).mean()) if q is not None else np.nan
    row["seconds"] = 10.0
    return row


def _artifact_split(r: dict[str, Any], visibility: float,
                    rng: np.random.Generator) -> dict[str, float]:
    """ID accuracy on the marked source pairs (split by whether the teacher could read the
    marker when ``visibility`` < 1) and on the clean ones: the teacher is right on the markers
    it reads and near its skill on the rest; a student follows the marker everywhere."""
    skill = r["accuracy"]["source_test"]["point"]
    if r["kind"] == "teacher":
        seen, hidden = 0.97, skill - 0.05
    else:
        seen, hidden = 0.98, 0.96 if r["kind"] == "student" else 0.9
    seen, hidden = (float(np.clip(v + rng.normal(0, 0.01), 0.0, 1.0)) for v in (seen, hidden))
    out = {"acc_id_clean": float(np.clip(skill - 0.08, 0.0, 1.0)),
           "acc_id_marked": visibility * seen + (1 - visibility) * hidden}
    if visibility < 1:  # as results_table: the split exists only when some cues were hidden
        out.update(acc_id_seen=seen, acc_id_hidden=hidden)
    else:
        out.update(acc_id_seen=np.nan, acc_id_hidden=np.nan)
    return out
