"""Label-free OOD risk: predict the OOD gain of a new target domain from its drift alone.

:class:`OODRiskEstimator` fits ``gain ~ intercept + slope * drift`` on target domains that have
labels (one value per run x domain) with a bootstrap prediction interval, trusts it only when
the bootstrap interval of the Spearman correlation excludes 0, and predicts the gain of a domain
where only hidden states -- hence drift (:mod:`anchorviz.analysis.drift`) -- are available;
:class:`OODRiskPrediction` is what ``predict`` returns.

Bad input (lengths that differ, NaN / inf, too few runs, a constant column) raises
:class:`~anchorviz.analysis.drift_inputs.DriftError` -- never a silent NaN.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from anchorviz.analysis.drift import boot_spearman, percentile_ci, xy_pairs
from anchorviz.analysis.drift_inputs import DriftError, to_numpy

logger = logging.getLogger(__name__)

__all__ = ["OODRiskEstimator", "OODRiskPrediction"]


@dataclass(frozen=True)
class OODRiskPrediction:
    """Result of :meth:`OODRiskEstimator.predict`.

    ``gain``, ``lower``, ``upper`` have the shape of the drift input (floats for a scalar) and
    are ``None`` when the relation is unreliable; ``status`` is ``"ok"`` or
    ``"relation too weak to predict: <reason>"``.
    """

    drift: Any
    gain: Any
    lower: Any
    upper: Any
    level: float
    reliable: bool
    status: str


class OODRiskEstimator:
    """Label-free OOD risk: predict the OOD gain of a new target domain from its drift alone.

    Fit on target domains that have labels (one value per run x domain: drift, OOD gain), then
    predict the gain for a domain where only hidden states -- hence drift -- are available.
    The fit is ordinary least squares ``gain ~ intercept + slope * drift``; the prediction
    interval comes from refitting on bootstrap resamples of the runs plus a resampled residual
    (so it covers a new observation, not just the mean). The relation is trusted
    (``reliable_``) only when n >= ``min_runs`` and the bootstrap interval of the Spearman
    correlation excludes 0; otherwise ``predict`` returns no numbers and says why.

    Args:
        n_boot: bootstrap resamples.
        level: coverage of the Spearman interval and of the prediction interval.
        min_runs: smallest number of runs to trust (default 4).
        seed: seed of all resampling (fit and predict are deterministic).

    Attributes (after ``fit``):
        slope_, intercept_: the least-squares line.
        spearman_: Spearman correlation of drift and gain.
        ci_: (lo, hi) bootstrap interval of the Spearman correlation.
        n_: number of runs.
        reliable_: whether predictions are returned.
        reason_: why not (empty when reliable).
        boot_coef_: (n_boot_valid, 2) bootstrap (intercept, slope) pairs.
    """

    def __init__(self, n_boot: int = 2000, level: float = 0.95, min_runs: int = 4, seed: int = 0):
        self.n_boot = n_boot
        self.level = level
        self.min_runs = min_runs
        self.seed = seed

    def fit(self, drift_values: Any, ood_gains: Any) -> OODRiskEstimator:
        """Fit on labelled domains.

        Args:
            drift_values: (n,) or (n, 1) drift per run x domain.
            ood_gains: (n,) OOD gain (e.g. AOG) of the same runs.

        Returns:
            self.

        Raises:
            DriftError: lengths differ, non-finite values, n < 2, constant drift or gains.
        """
        x, y = xy_pairs(drift_values, ood_gains, ("drift_values", "ood_gains"))
        n = x.size
        if n < 2:
            raise DriftError(f"need at least 2 runs to fit, got {n}")
        if np.ptp(x) == 0.0:
            raise DriftError("drift_values are constant; the slope is undefined")
        if np.ptp(y) == 0.0:
            raise DriftError("ood_gains are constant; there is no relation to learn")
        rng = np.random.default_rng(self.seed)
        fit = stats.linregress(x, y)
        self.slope_, self.intercept_ = float(fit.slope), float(fit.intercept)
        self.n_ = int(n)
        self.spearman_ = float(stats.spearmanr(x, y).statistic) if n >= 3 else float(
            np.sign(fit.slope)
        )
        boot_r, idx = boot_spearman(x, y, self.n_boot, rng)
        self.ci_ = percentile_ci(boot_r, self.level)
        # Bootstrap OLS fits (resamples with constant drift have no slope and are dropped).
        bx, by = x[idx], y[idx]
        bxc = bx - bx.mean(axis=1, keepdims=True)
        sxx = (bxc * bxc).sum(axis=1)
        ok = sxx > 0
        slope_b = (bxc[ok] * (by[ok] - by[ok].mean(axis=1, keepdims=True))).sum(axis=1) / sxx[ok]
        icpt_b = by[ok].mean(axis=1) - slope_b * bx[ok].mean(axis=1)
        self.boot_coef_ = np.column_stack([icpt_b, slope_b])
        resid = y - (self.intercept_ + self.slope_ * x)
        dof = max(n - 2, 1)
        self._resid_draw = rng.choice(resid, size=len(slope_b)) * math.sqrt(n / dof)
        reasons = []
        if n < self.min_runs:
            reasons.append(f"only {n} runs (need at least {self.min_runs})")
        lo, hi = self.ci_
        if lo <= 0.0 <= hi:
            reasons.append(
                f"the {self.level:.0%} bootstrap interval of the Spearman correlation "
                f"[{lo:.2f}, {hi:.2f}] includes 0"
            )
        if len(slope_b) == 0:
            reasons.append("no bootstrap resample had varying drift")
        self.reliable_ = not reasons
        self.reason_ = "; ".join(reasons)
        if not self.reliable_:
            logger.info("OOD risk relation not reliable: %s", self.reason_)
        return self

    def predict(self, drift_value: Any) -> OODRiskPrediction:
        """Predicted OOD gain for drift value(s) with a bootstrap prediction interval.

        Args:
            drift_value: a float or an array of drift values (any shape).

        Returns:
            :class:`OODRiskPrediction`; numbers are ``None`` when ``reliable_`` is False.
        """
        if not hasattr(self, "reliable_"):
            raise RuntimeError("OODRiskEstimator is not fitted; call fit() first")
        d = np.asarray(to_numpy(drift_value), dtype=np.float64)
        if not np.isfinite(d).all():
            raise DriftError("drift_value contains NaN or inf")
        scalar = d.ndim == 0
        if not self.reliable_:
            return OODRiskPrediction(
                drift=float(d) if scalar else d, gain=None, lower=None, upper=None,
                level=self.level, reliable=False,
                status=f"relation too weak to predict: {self.reason_}",
            )
        flat = d.reshape(-1)
        point = self.intercept_ + self.slope_ * flat
        sims = (self.boot_coef_[:, :1] + self.boot_coef_[:, 1:] * flat[None, :]
                + self._resid_draw[:, None])
        lo, hi = np.quantile(sims, [(1 - self.level) / 2, (1 + self.level) / 2], axis=0)

        def shape(a: np.ndarray) -> Any:
            return float(a[0]) if scalar else a.reshape(d.shape)

        return OODRiskPrediction(
            drift=float(d) if scalar else d, gain=shape(point), lower=shape(lo), upper=shape(hi),
            level=self.level, reliable=True, status="ok",
        )
