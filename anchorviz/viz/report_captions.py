"""The captions of the sweep report's figures (`anchorviz.viz.report`): one line per figure of what
to look for, and the observed-numbers captions of the drift and lambda figures."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from anchorviz.viz.common import (
    GROUP_KEYS,
    group_mask,
    group_table,
    layers_label,
    select_condition,
)

logger = logging.getLogger(__name__)



#: one line under each report figure: what to look for. Keyed by the figure's title, or by a
#: part of it for titles that name a metric or a run (:func:`figure_caption_for`)
FIGURE_CAPTIONS: dict[str, str] = {
    "In-distribution vs out-of-distribution accuracy":
        "Look at the drop from each method's ID bar to its OOD bar: a student that gains over "
        "the teacher in distribution but not out of it learned something that does not travel.",
    "Shortcut or skill: ID accuracy on pairs with and without the artefact":
        "The gap between the bars is the shortcut: a model far more accurate on marked pairs "
        "than on clean ones reads the marker, not the preference.",
    "Transfer scores (WRG, AOG, NTS)":
        "Compare each method's WRG with its AOG: the part of the ID gain (WRG) that is missing "
        "from the OOD gain (AOG) did not carry over; NTS below 0 is a net loss.",
    "Which cues each model follows, per target":
        "Look for bars above the teacher's: a student that follows a cue where it disagrees "
        "with the label learned the cue, and loses accuracy wherever the cue misleads.",
    "Representation drift by layer":
        "Look at where the lines part: the layer from which a student's curve leaves the "
        "reference (CKA below 1, drift above 0) is where training rewrote its representation. "
        "Whether anchoring held the representation, and whether that bought transfer, is read "
        "from this folder's numbers below.",
    "of reference and student states":
        "Follow the grey lines: long ones are responses training moved far from where the "
        "pretrained model put them; target points that leave the open circles show drift where "
        "the student was never trained.",
    "Drift vs OOD gain, per target":
        "Each point is one run: its drift on a target against its OOD gain there. The method's "
        "premise is that drift costs transfer, which would show as points falling to the right; "
        "what this folder shows is computed below.",
    "Lambda sweep":
        "Read each panel from left to right: what a stronger anchor (larger lambda) does to "
        "accuracy in and out of distribution, to NTS and to drift, against the naive student "
        "(dashed) and the weak teacher (dotted).",
    "Teacher soft-label confidence":
        "Look at how far the labels sit from 0.5: labels piled near 0.5 teach the student little.",
    "Training loss per step: fit and ANCHOR terms":
        "Check that the fit loss falls and levels off; a large or growing ANCHOR term means the "
        "student is being pulled back from where the fit wants to take it.",
}


def _condition_students(results: pd.DataFrame) -> pd.DataFrame:
    """The student rows of the figures' condition (`select_condition`'s default: the largest
    artefact strength, the first value of every other varying setting)."""
    students = results[results["kind"] == "student"]
    return select_condition(students)[0] if len(students) else students


def _group_means(rows: pd.DataFrame, cols: list[str], seeds: list | None = None) -> pd.DataFrame:
    """Mean of ``cols`` per (method, lambda, layers) group over ``seeds`` (all when None), with
    the groups' labels in reading order and the seeds each mean used."""
    out = []
    for g in group_table(rows).itertuples(index=False):
        part = rows[group_mask(rows, g.method, g.anchor_lambda, g.anchor_layers)]
        if seeds is not None:
            part = part[part["seed"].isin(seeds)]
        part = part.dropna(subset=cols)
        if part.empty:
            continue
        out.append({**{k: getattr(g, k) for k in GROUP_KEYS}, "label": g.label,
                    "seeds": sorted(part["seed"].unique().tolist()),
                    **{c: float(part[c].mean()) for c in cols}})
    return pd.DataFrame(out)


def _seeds_text(seeds: list) -> str:
    return f"seed {seeds[0]}" if len(seeds) == 1 else (
        f"the mean over seeds {', '.join(map(str, seeds))}")


def drift_caption(results: pd.DataFrame, drift_col: str) -> str | None:
    """What this folder shows about ANCHOR and drift, from its numbers: each ANCHOR setting's
    last-layer target drift (``drift_col``, a results column) and NTS against the naive
    student's on the seeds both have, and whether less drift came with better transfer. None
    without naive and ANCHOR students that have both numbers."""
    rows = _condition_students(results)
    if drift_col not in rows or "nts" not in rows:
        return None
    rows = rows.dropna(subset=[drift_col, "nts"])
    naive_seeds = set(rows.loc[rows["method"] == "naive", "seed"])
    anchor = rows[rows["method"] == "anchor"]
    if not naive_seeds or anchor.empty:
        return None
    similarity = "cka" in drift_col  # CKA: higher = closer to the reference
    name = ("CKA with the reference" if similarity else "drift from the reference")
    parts, better, closer = [], 0, 0
    groups = _group_means(anchor, [drift_col, "nts"])
    if len(groups) > 3:  # the weakest and the strongest anchor, per layer choice
        groups = pd.concat([g.iloc[[0, -1]] if len(g) > 1 else g
                            for _, g in groups.groupby("anchor_layers", sort=False)])
    for g in groups.itertuples(index=False):
        seeds = sorted(naive_seeds & set(g.seeds))
        if not seeds:
            continue
        a = _group_means(anchor[np.isclose(anchor["anchor_lambda"], g.anchor_lambda)
                                & (anchor["anchor_layers"] == g.anchor_layers)],
                         [drift_col, "nts"], seeds).iloc[0]
        n = _group_means(rows[rows["method"] == "naive"], [drift_col, "nts"], seeds).iloc[0]
        held = a[drift_col] > n[drift_col] if similarity else a[drift_col] < n[drift_col]
        closer += bool(held)
        better += bool(a["nts"] > n["nts"])
        parts.append(f"{g.label}: {name} {a[drift_col]:.2f} against the naive student's "
                     f"{n[drift_col]:.2f}, NTS {100 * a['nts']:+.1f} against "
                     f"{100 * n['nts']:+.1f} ({_seeds_text(seeds)})")
    if not parts:
        return None
    k = len(parts)
    if closer == k and better == 0:
        verdict = ("anchoring held the representation closer to the pretrained one, but that did "
                   "not buy transfer: every anchored setting has a lower NTS than the naive "
                   "student")
    elif closer == k and better == k:
        verdict = ("anchoring held the representation closer to the pretrained one, and every "
                   "anchored setting has a higher NTS than the naive student")
    elif closer < k:
        verdict = (f"anchoring held the representation closer than the naive student in only "
                   f"{closer} of {k} settings, and {better} of {k} have a higher NTS")
    else:
        verdict = (f"anchoring held the representation closer to the pretrained one, and {better} "
                   f"of {k} anchored settings have a higher NTS than the naive student")
    return ("In this folder (last layer, mean over targets), " + verdict + ". "
            + "; ".join(parts) + ". These are means, not tests: the verdict box tests the ANCHOR "
            "setting chosen on source validation against the naive student.")


def drift_vs_ood_caption(fig) -> str | None:
    """What the drift-vs-OOD figure shows, from the relations it computed
    (``fig.layout.meta["relations"]``): per panel the direction of the Spearman correlation
    and whether its interval excludes 0, or that there are too few runs for one."""
    meta = getattr(getattr(fig, "layout", None), "meta", None)
    if not isinstance(meta, dict) or "relations" not in meta:
        return None
    rels, min_n = meta["relations"], meta.get("min_n")
    shown = {k: r for k, r in rels.items() if r}
    if not shown:
        return (f"In this folder there are too few runs per panel for a correlation (fewer than "
                f"{min_n}): nothing can be read from the slope yet. More seeds, or an ANCHOR "
                "grid over lambda, give each panel enough points.")
    up, down, flat = [], [], []
    for name, r in shown.items():
        lo, hi = r["spearman_ci"]
        text = f"{name} {r['spearman']:+.2f} [{lo:+.2f}, {hi:+.2f}], n = {r['n']}"
        (up if lo > 0 else down if hi < 0 else flat).append(text)
    out = ["In this folder (Spearman ρ with its 95% bootstrap interval over runs)"]
    if up:
        out.append("more drift goes with MORE OOD gain on " + "; ".join(up)
                   + ", the opposite of the premise")
    if down:
        out.append("more drift goes with less OOD gain on " + "; ".join(down)
                   + ", as the premise says")
    if flat:
        out.append("no relation beyond the interval on " + "; ".join(flat))
    missing = [k for k, r in rels.items() if not r]
    text = out[0] + ": " + "; ".join(out[1:]) + "."
    if missing:
        text += f" Too few runs for a correlation on {', '.join(missing)}."
    return text


def lambda_caption(results: pd.DataFrame) -> str | None:
    """What the lambda sweep shows in this folder: per anchored-layer choice, OOD and ID
    accuracy at the smallest and the largest lambda (mean over seeds), against the naive
    student's. None with fewer than two lambdas."""
    rows = _condition_students(results)
    need = ["acc_id", "acc_ood"]
    if not set(need) <= set(rows.columns):
        return None
    anchor = rows[rows["method"] == "anchor"]
    naive = _group_means(rows[rows["method"] == "naive"], need)
    parts, rises = [], []
    for layers, part in anchor.groupby("anchor_layers", sort=False):
        g = _group_means(part, need).sort_values("anchor_lambda")
        if len(g) < 2:
            continue
        lo, hi = g.iloc[0], g.iloc[-1]
        d_ood, d_id = 100 * (hi["acc_ood"] - lo["acc_ood"]), 100 * (hi["acc_id"] - lo["acc_id"])
        rises.append(d_ood > 0)
        parts.append(f"anchoring the {layers_label(str(layers)) or layers}, from lambda {lo['anchor_lambda']:g} to "
                     f"{hi['anchor_lambda']:g} OOD accuracy goes {100 * lo['acc_ood']:.1f} -> "
                     f"{100 * hi['acc_ood']:.1f} ({d_ood:+.1f}) and ID accuracy "
                     f"{100 * lo['acc_id']:.1f} -> {100 * hi['acc_id']:.1f} ({d_id:+.1f})")
    if not parts:
        return None
    head = ("In this folder (mean over seeds), stronger anchoring "
            + ("raised OOD accuracy" if all(rises) else "did not raise OOD accuracy"
               if not any(rises) else "raised OOD accuracy in some settings, not in others")
            + ": " + "; ".join(parts))
    if len(naive):
        head += (f". The naive student (no anchor): OOD {100 * naive.iloc[0]['acc_ood']:.1f}, "
                 f"ID {100 * naive.iloc[0]['acc_id']:.1f}")
    return head + "."


def observed_caption(title: str, fig, results: pd.DataFrame) -> str | None:
    """The part of a figure's caption computed from this folder (:func:`drift_caption`,
    :func:`drift_vs_ood_caption`, :func:`lambda_caption`); None for figures whose caption is
    a reading guide only. Never raises: a caption that cannot be computed is left out."""
    try:
        if title.startswith("Representation drift by layer"):
            col = ("drift_cka_debiased_target" if "CKA" in title.upper() else
                   "drift_cos_centred_target" if "centred" in title else "drift_cos_target")
            if col not in results or results[col].isna().all():
                col = {"drift_cka_debiased_target": "drift_cka_target",
                       "drift_cos_centred_target": "drift_cos_target"}.get(col, col)
            return drift_caption(results, col)
        if title.startswith("Drift vs OOD gain"):
            return drift_vs_ood_caption(fig)
        if title == "Lambda sweep":
            return lambda_caption(results)
    except Exception as err:  # the figure stands without its computed line
        logger.warning("report: caption of %r not computed (%s)", title, err)
    return None


def figure_caption_for(title: str) -> str | None:
    """The :data:`FIGURE_CAPTIONS` line of a report figure: its title's own, else the one of
    the longest key the title contains (titles that name a metric or a run); None if none."""
    if title in FIGURE_CAPTIONS:
        return FIGURE_CAPTIONS[title]
    keys = [k for k in FIGURE_CAPTIONS if k in title]
    return FIGURE_CAPTIONS[max(keys, key=len)] if keys else None
