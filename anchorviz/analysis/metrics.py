"""Evaluation metrics: pairwise accuracy, WRG / AOG / NTS / PGR, bootstrap and seed intervals.

All inputs are 1-D array-likes (numpy arrays, lists, CPU tensors); accuracies are fractions in
[0, 1] (not percentages). A pair is *correct* when the reward of its chosen response exceeds the
reward of its rejected one; a tie counts half (per-pair correctness is 1, 0.5 or 0).

Transfer scores (the paper's definitions), from the teacher's and the student's accuracies on
the source dataset's held-out split (ID) and on a target dataset (OOD)::

    WRG = Acc_student(ID)  - Acc_teacher(ID)
    AOG = Acc_student(OOD) - Acc_teacher(OOD)
    NTS = AOG - max(0, Acc_teacher(ID) - Acc_student(ID))

and the performance gap recovered ``PGR = (student - teacher) / (ceiling - teacher)``, where the
ceiling is the strong model trained on gold labels.

Bootstrap intervals are percentile intervals over resampled pairs. Teacher and student are
scored on the same pairs, so a paired bootstrap resamples pair indices once per split and uses
them for both models; the ID and OOD splits are resampled independently.

Real preference sets hold several pairs per prompt, and pairs of one prompt are not independent:
a bootstrap over pairs then gives too narrow an interval. Given ``groups`` (one prompt id per
pair) with some group of more than one pair, the bootstrap resamples whole groups instead (a
cluster bootstrap: draw groups with replacement, keep all their pairs); without groups, or with
every group a single pair, it resamples pairs exactly as before. `bootstrap_kind` says which.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

__all__ = [
    "Interval",
    "SeedSummary",
    "accuracy_by_group",
    "bootstrap_accuracy_ci",
    "bootstrap_kind",
    "paired_bootstrap_transfer",
    "pairwise_accuracy",
    "per_pair_correct",
    "pgr",
    "seed_summary",
    "transfer_scores",
]

# a bootstrap draws (n_boot, n) indices; draw them in chunks of at most this many entries
_BOOT_CHUNK_ENTRIES = 2_000_000


class Interval(NamedTuple):
    """A point estimate with a confidence interval ``[lo, hi]`` (a plain 3-tuple too)."""

    point: float
    lo: float
    hi: float


class SeedSummary(NamedTuple):
    """Mean, sample standard deviation and t-interval half width of a metric across seeds."""

    mean: float
    std: float
    half_width: float


# --------------------------------------------------------------------------- validation


def _as_vector(values: ArrayLike, name: str) -> np.ndarray:
    """``values`` as a finite, non-empty 1-D float64 array (ValueError naming ``name``)."""
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be numeric, got {type(values).__name__}") from exc
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty")
    if not np.isfinite(arr).all():
        n_bad = int((~np.isfinite(arr)).sum())
        raise ValueError(f"{name} contains {n_bad} non-finite value(s) (NaN or inf)")
    return arr


def _same_length(a: np.ndarray, b: np.ndarray, name_a: str, name_b: str) -> None:
    if a.shape != b.shape:
        raise ValueError(
            f"{name_a} and {name_b} must score the same pairs, got lengths {a.size} and {b.size}"
        )


def _as_correct(values: ArrayLike, name: str) -> np.ndarray:
    """Per-pair correctness: a 1-D array of 0, 0.5 and 1 (see `per_pair_correct`)."""
    arr = _as_vector(values, name)
    if not np.isin(arr, (0.0, 0.5, 1.0)).all():
        raise ValueError(f"{name} must contain only 0, 0.5 and 1 (per-pair correctness)")
    return arr


def _as_accuracy(value: float, name: str) -> float:
    value = float(value)
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise ValueError(f"{name} must be an accuracy in [0, 1], got {value}")
    return value


def _check_alpha(alpha: float) -> None:
    if not (0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")


# --------------------------------------------------------------------------- accuracy


def per_pair_correct(r_chosen: ArrayLike, r_rejected: ArrayLike) -> np.ndarray:
    """Per-pair correctness, shape ``(n,)``: 1 if ``r_chosen > r_rejected``, 0.5 on a tie, else 0."""
    c = _as_vector(r_chosen, "r_chosen")
    r = _as_vector(r_rejected, "r_rejected")
    _same_length(c, r, "r_chosen", "r_rejected")
    return np.where(c > r, 1.0, np.where(c == r, 0.5, 0.0))


def pairwise_accuracy(r_chosen: ArrayLike, r_rejected: ArrayLike) -> float:
    """Fraction of pairs with ``r_chosen > r_rejected``, ties counting half."""
    return float(per_pair_correct(r_chosen, r_rejected).mean())


def accuracy_by_group(correct: ArrayLike, groups: ArrayLike) -> dict[str, tuple[float, int]]:
    """Accuracy and pair count per group label: ``{group: (accuracy, n)}``.

    ``correct`` is per-pair correctness (0, 0.5, 1; see `per_pair_correct`), ``groups`` one label
    per pair (e.g. whether the pair carries the planted artefact), so a shortcut shows as a gap
    between the groups."""
    c = _as_correct(correct, "correct")
    g = np.asarray(groups).astype(str)
    if g.shape != c.shape:
        raise ValueError(f"groups must give one label per pair: {g.size} labels for {c.size} pairs")
    return {str(k): (float(c[g == k].mean()), int((g == k).sum())) for k in np.unique(g)}


# --------------------------------------------------------------------------- transfer scores


def _nts(aog: float | np.ndarray, wrg: float | np.ndarray) -> float | np.ndarray:
    # max(0, Acc_teacher(ID) - Acc_student(ID)) == max(0, -WRG)
    return aog - np.maximum(0.0, -wrg)


def transfer_scores(
    teacher_id: float, teacher_ood: float, student_id: float, student_ood: float
) -> dict[str, float]:
    """WRG, AOG and NTS from four accuracies in [0, 1].

    Returns:
        ``{"wrg": ..., "aog": ..., "nts": ...}`` where ``wrg = student_id - teacher_id``,
        ``aog = student_ood - teacher_ood`` and ``nts = aog - max(0, teacher_id - student_id)``:
        an ID regression of the student is charged against its OOD gain, an ID gain is not
        credited. ``nts <= aog`` always.
    """
    t_id = _as_accuracy(teacher_id, "teacher_id")
    t_ood = _as_accuracy(teacher_ood, "teacher_ood")
    s_id = _as_accuracy(student_id, "student_id")
    s_ood = _as_accuracy(student_ood, "student_ood")
    wrg = s_id - t_id
    aog = s_ood - t_ood
    return {"wrg": wrg, "aog": aog, "nts": float(_nts(aog, wrg))}


def pgr(student: float, teacher: float, ceiling: float) -> float | None:
    """Performance gap recovered, ``(student - teacher) / (ceiling - teacher)``.

    1 means the student matches the gold-trained ceiling, 0 means it only matches its teacher;
    values outside [0, 1] are possible. Returns None (never NaN or inf) when the gap is zero,
    ``ceiling == teacher`` (within 1e-12): PGR is undefined there.
    """
    s = _as_accuracy(student, "student")
    t = _as_accuracy(teacher, "teacher")
    c = _as_accuracy(ceiling, "ceiling")
    gap = c - t
    if abs(gap) <= 1e-12:
        return None
    return (s - t) / gap


# --------------------------------------------------------------------------- bootstrap


def _index_chunks(n: int, n_boot: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """Bootstrap resamples of ``range(n)`` as ``(chunk, n)`` index arrays, ``n_boot`` rows in all."""
    rows = max(1, _BOOT_CHUNK_ENTRIES // n)
    done = 0
    while done < n_boot:
        k = min(rows, n_boot - done)
        yield rng.integers(0, n, size=(k, n))
        done += k


def _resampled_means(
    columns: list[np.ndarray], n_boot: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Bootstrap means of equal-length ``columns``, all resampled with the same indices."""
    n = columns[0].size
    out: list[list[np.ndarray]] = [[] for _ in columns]
    for idx in _index_chunks(n, n_boot, rng):
        for j, col in enumerate(columns):
            out[j].append(col[idx].mean(axis=1))
    return [np.concatenate(parts) for parts in out]


def _group_codes(groups: ArrayLike | None, n: int, name: str) -> np.ndarray | None:
    """Integer codes ``0..G-1`` of ``groups`` (one id per pair), or None for a pair bootstrap:
    no groups given, or every group a single pair."""
    if groups is None:
        return None
    g = np.asarray(groups)
    if g.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one group id per pair), got shape {g.shape}")
    if g.size != n:
        raise ValueError(f"{name} must give one group id per pair: {g.size} ids for {n} pairs")
    if g.dtype.kind == "f" and not np.isfinite(g).all():
        raise ValueError(f"{name} contains non-finite group ids (NaN or inf)")
    if g.dtype == object:
        if any(v is None for v in g):
            raise ValueError(f"{name} contains missing group ids (None)")
        g = g.astype(str)
    uniq, codes = np.unique(g, return_inverse=True)
    if uniq.size == n:  # all singletons: resampling groups is resampling pairs
        return None
    if uniq.size < 2:
        raise ValueError(
            f"{name} puts all {n} pairs in one group: a cluster bootstrap needs at least two "
            "groups (pass groups=None when the pairs have no prompt ids)"
        )
    return codes.reshape(-1)


def bootstrap_kind(groups: ArrayLike | None) -> str:
    """``"cluster"`` when ``groups`` is given and some group holds more than one pair (the
    bootstrap resamples groups), else ``"pair"`` (it resamples pairs)."""
    if groups is None:
        return "pair"
    g = np.asarray(groups)
    return "pair" if _group_codes(g, g.size, "groups") is None else "cluster"


def _cluster_resampled_means(
    columns: list[np.ndarray], codes: np.ndarray, n_boot: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Cluster-bootstrap means of equal-length ``columns``: each resample draws as many groups
    as there are, with replacement (the same groups for every column), and averages all the
    pairs of the drawn groups. Vectorised over per-group sums and sizes."""
    n_groups = int(codes.max()) + 1
    sizes = np.bincount(codes, minlength=n_groups).astype(np.float64)
    sums = [np.bincount(codes, weights=col, minlength=n_groups) for col in columns]
    out: list[list[np.ndarray]] = [[] for _ in columns]
    for idx in _index_chunks(n_groups, n_boot, rng):
        den = sizes[idx].sum(axis=1)
        for j, s in enumerate(sums):
            out[j].append(s[idx].sum(axis=1) / den)
    return [np.concatenate(parts) for parts in out]


def _resample(
    columns: list[np.ndarray], codes: np.ndarray | None, n_boot: int, rng: np.random.Generator
) -> list[np.ndarray]:
    if codes is None:
        return _resampled_means(columns, n_boot, rng)
    return _cluster_resampled_means(columns, codes, n_boot, rng)


def _percentiles(samples: np.ndarray, alpha: float) -> tuple[float, float]:
    lo, hi = np.quantile(samples, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


def _check_n_boot(n_boot: int) -> None:
    if int(n_boot) != n_boot or n_boot < 1:
        raise ValueError(f"n_boot must be a positive integer, got {n_boot}")


def bootstrap_accuracy_ci(
    correct: ArrayLike,
    n_boot: int = 2000,
    alpha: float = 0.05,
    seed: int = 0,
    groups: ArrayLike | None = None,
) -> Interval:
    """Accuracy with a percentile bootstrap interval over pairs (or over prompt groups).

    Args:
        correct: per-pair correctness ``(n,)`` of 0 / 0.5 / 1 (see `per_pair_correct`).
        n_boot: number of resamples.
        alpha: 1 - confidence level (0.05 -> a 95% interval).
        seed: seed of the resampling; the same seed gives the same interval.
        groups: optional group id per pair ``(n,)`` (e.g. the prompt). When some group holds
            more than one pair, each resample draws groups with replacement and keeps all their
            pairs (cluster bootstrap); otherwise, and when None, it draws pairs, giving exactly
            the interval of ``groups=None``. `bootstrap_kind(groups)` says which was used.

    Returns:
        ``Interval(point, lo, hi)``: the observed accuracy and the ``alpha / 2`` and
        ``1 - alpha / 2`` quantiles of the resampled accuracies.
    """
    arr = _as_correct(correct, "correct")
    codes = _group_codes(groups, arr.size, "groups")
    _check_n_boot(n_boot)
    _check_alpha(alpha)
    rng = np.random.default_rng(seed)
    (means,) = _resample([arr], codes, int(n_boot), rng)
    return Interval(float(arr.mean()), *_percentiles(means, alpha))


def _pgr_interval(
    teacher: np.ndarray,
    student: np.ndarray,
    ceiling: np.ndarray,
    boot: tuple[np.ndarray, np.ndarray, np.ndarray],
    alpha: float,
) -> Interval | None:
    point = pgr(student.mean(), teacher.mean(), ceiling.mean())
    if point is None:
        return None
    t_b, s_b, c_b = boot
    gap = c_b - t_b
    defined = np.abs(gap) > 1e-12  # resamples with no teacher-ceiling gap have no PGR
    if not defined.any():
        return None
    ratios = (s_b[defined] - t_b[defined]) / gap[defined]
    return Interval(point, *_percentiles(ratios, alpha))


def paired_bootstrap_transfer(
    teacher_correct_id: ArrayLike,
    student_correct_id: ArrayLike,
    teacher_correct_ood: ArrayLike,
    student_correct_ood: ArrayLike,
    ceiling_correct_id: ArrayLike | None = None,
    ceiling_correct_ood: ArrayLike | None = None,
    n_boot: int = 2000,
    alpha: float = 0.05,
    seed: int = 0,
    groups_id: ArrayLike | None = None,
    groups_ood: ArrayLike | None = None,
) -> dict[str, Interval | None]:
    """WRG, AOG, NTS (and PGR) with paired percentile bootstrap intervals.

    Each resample draws one set of ID pair indices, shared by teacher, student and ceiling (they
    are scored on the same pairs), and independently one set of OOD pair indices; WRG, AOG and
    NTS are computed from the same resample, so NTS's interval accounts for both splits.

    Args:
        teacher_correct_id, student_correct_id: per-pair correctness on the ID split, same
            length (same pairs, same order).
        teacher_correct_ood, student_correct_ood: the same on the OOD split.
        ceiling_correct_id, ceiling_correct_ood: optional correctness of the gold-trained
            ceiling on each split, giving ``"pgr"`` (ID) and ``"pgr_ood"``.
        n_boot, alpha, seed: as in `bootstrap_accuracy_ci`.
        groups_id, groups_ood: optional group id (prompt) per pair of the ID / OOD split, in
            the order of that split's arrays. A split whose groups hold more than one pair is
            resampled by groups (cluster bootstrap, the same groups for teacher, student and
            ceiling); otherwise by pairs, exactly as without groups. `bootstrap_kind` says
            which, per split.

    Returns:
        ``{"wrg", "aog", "nts"}`` -> ``Interval(point, lo, hi)``, plus ``"pgr"`` /
        ``"pgr_ood"`` when the ceiling is given: an Interval, or None when the observed
        ceiling and teacher accuracies are equal (PGR undefined; see `pgr`) or no resample
        has a teacher-ceiling gap. Resamples with no gap are left out of PGR's interval.
    """
    t_id = _as_correct(teacher_correct_id, "teacher_correct_id")
    s_id = _as_correct(student_correct_id, "student_correct_id")
    t_ood = _as_correct(teacher_correct_ood, "teacher_correct_ood")
    s_ood = _as_correct(student_correct_ood, "student_correct_ood")
    _same_length(t_id, s_id, "teacher_correct_id", "student_correct_id")
    _same_length(t_ood, s_ood, "teacher_correct_ood", "student_correct_ood")
    id_cols = [t_id, s_id]
    ood_cols = [t_ood, s_ood]
    if ceiling_correct_id is not None:
        c_id = _as_correct(ceiling_correct_id, "ceiling_correct_id")
        _same_length(t_id, c_id, "teacher_correct_id", "ceiling_correct_id")
        id_cols.append(c_id)
    if ceiling_correct_ood is not None:
        c_ood = _as_correct(ceiling_correct_ood, "ceiling_correct_ood")
        _same_length(t_ood, c_ood, "teacher_correct_ood", "ceiling_correct_ood")
        ood_cols.append(c_ood)
    codes_id = _group_codes(groups_id, t_id.size, "groups_id")
    codes_ood = _group_codes(groups_ood, t_ood.size, "groups_ood")
    _check_n_boot(n_boot)
    _check_alpha(alpha)

    rng = np.random.default_rng(seed)
    id_boot = _resample(id_cols, codes_id, int(n_boot), rng)
    ood_boot = _resample(ood_cols, codes_ood, int(n_boot), rng)

    point = transfer_scores(t_id.mean(), t_ood.mean(), s_id.mean(), s_ood.mean())
    wrg_b = id_boot[1] - id_boot[0]
    aog_b = ood_boot[1] - ood_boot[0]
    nts_b = _nts(aog_b, wrg_b)
    result: dict[str, Interval | None] = {
        "wrg": Interval(point["wrg"], *_percentiles(wrg_b, alpha)),
        "aog": Interval(point["aog"], *_percentiles(aog_b, alpha)),
        "nts": Interval(point["nts"], *_percentiles(nts_b, alpha)),
    }
    if ceiling_correct_id is not None:
        result["pgr"] = _pgr_interval(id_cols[0], id_cols[1], id_cols[2], tuple(id_boot), alpha)
    if ceiling_correct_ood is not None:
        result["pgr_ood"] = _pgr_interval(
            ood_cols[0], ood_cols[1], ood_cols[2], tuple(ood_boot), alpha
        )
    return result


# --------------------------------------------------------------------------- across seeds


def seed_summary(values: ArrayLike, confidence: float = 0.95) -> SeedSummary:
    """Mean, sample std (ddof=1) and t-interval half width of one metric across seeds.

    ``half_width = t_{(1 + confidence) / 2, n - 1} * std / sqrt(n)`` (scipy's Student t), so
    ``mean +- half_width`` is the ``confidence`` interval of the mean. With a single seed the
    spread is unknown: ``std`` and ``half_width`` are NaN (plotly draws no error bar).
    """
    arr = _as_vector(values, "values")
    if not (0.0 < confidence < 1.0):
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    mean = float(arr.mean())
    n = arr.size
    if n < 2:
        return SeedSummary(mean, float("nan"), float("nan"))
    std = float(arr.std(ddof=1))
    t = float(stats.t.ppf((1.0 + confidence) / 2.0, df=n - 1))
    return SeedSummary(mean, std, t * std / math.sqrt(n))
