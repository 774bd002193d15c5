"""The equal-geometry slope corrected for measurement error (identify v3,
``identify.reference_halves``): AUROC's error from split halves of its texts, the
reference's from the second half's diffmean. ``estimator.equal_geometry`` hands a run
with the second half to :func:`equal_geometry_corrected`; :func:`beyond_geometry` says how
much of AUROC's spread inside the cells is left for it to use."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from experiments.identify.estimation.variance import demean
from experiments.record.identify import Correction
from metrics.cluster import ClusterFit

CORRECTED = (
    "errors in variables within (concept, angle, band) cells: AUROC's within-cell "
    "measurement-error variance from split halves of the test texts removed, cos to the "
    "other half's diffmean as the geometry covariate at reliability 1/2 by design; "
    "concept bootstrap (percentile), clusters = concepts"
)
# The correction is refused when AUROC's within-cell reliability is below this: the
# corrected slope divides by the reliable share of AUROC's spread, unstable near 0.
MIN_AUROC_RELIABILITY = 0.1


@dataclass(frozen=True)
class CorrectedFit(ClusterFit):
    """The equal-geometry slope corrected for measurement error (:func:`equal_geometry`),
    with the reliabilities it used and the uncorrected slope beside it."""

    auroc_reliability: float | None = None  # of AUROC inside cells (1 − error / spread)
    cos_reliability: float | None = None  # of cos_half inside cells: 1/2 by design
    uncorrected: float | None = None  # the bare OLS slope on measured AUROC
    beyond_geometry: float | None = None  # AUROC's reliable within-cell share beyond it

    def to_dict(self) -> dict[str, object]:
        """The fit's fields, the correction's four under ``correction`` (the record's
        ``Correction``, beside the estimate rather than inside the generic estimate)."""
        out = super().to_dict()
        out["correction"] = {k: out.pop(k) for k in Correction.model_fields}
        return out


def as_recorded(fit: ClusterFit) -> tuple[ClusterFit, Correction | None]:
    """A fit as a record keeps it: the generic estimate, and a corrected fit's
    reliabilities beside it (the record's ``Correction``; None for any other fit)."""
    if not isinstance(fit, CorrectedFit):
        return fit, None
    data = fit.to_dict()
    return ClusterFit.of(data), Correction.model_validate(data["correction"])


def _cell_moments(data: pd.DataFrame, y: str, predictor: str) -> tuple[np.ndarray, list[str]]:
    """Per concept, the within-cell cross-products [S_aa, S_am, S_mm, S_ay, S_my, D_a]:
    a the predictor, m cos to the other half's diffmean, y the outcome, each less its
    cell's mean; D_a the summed within-cell AUROC error variances."""
    groups = data["cell"].to_numpy()
    cols = demean(data[[predictor, "cos_half", y]].to_numpy(dtype=np.float64), groups)
    a, m, yy = cols[:, 0], cols[:, 1], cols[:, 2]
    parts = np.stack(
        [a * a, a * m, m * m, a * yy, m * yy, data["auroc_error_within"].to_numpy(np.float64)],
        axis=1,
    )
    concepts = data["concept"].astype(str).to_numpy()
    names = sorted(set(concepts))
    index = np.searchsorted(names, concepts)
    out = np.zeros((len(names), parts.shape[1]))
    np.add.at(out, index, parts)
    return out, names


def _corrected_slope(s: np.ndarray, with_cos: bool) -> np.ndarray:
    """The moment estimator on summed cross-products (rows: replicates): AUROC's
    coefficient of y on (a, m) with the error variances taken off the diagonal
    (S_aa − D_a; S_mm/2: m's error is as large as its true spread, two equal halves)."""
    saa, sam, smm, say, smy, da = (s[:, k] for k in range(6))
    a_true = saa - da
    if not with_cos:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(a_true > 0, say / a_true, np.nan)
    m_true = smm / 2
    det = a_true * m_true - sam**2
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((a_true > 0) & (det > 0), (m_true * say - sam * smy) / det, np.nan)


def beyond_geometry(total: np.ndarray) -> float | None:
    """The share of AUROC's observed within-cell variance that is reliable and not
    explained by the direction's true geometry (summed cross-products of
    :func:`_cell_moments`): (S_aa − D_a − S_am²/(S_mm/2)) / S_aa. What the corrected
    slope has to work with; near 0 or below, the cells' AUROC differences are geometry
    (v*'s own error) and measurement error, and the slope is not identified."""
    saa, sam, smm, _, _, da = (float(v) for v in total)
    return None if saa <= 0 or smm <= 0 else (saa - da - sam**2 / (smm / 2)) / saa


def equal_geometry_corrected(
    data: pd.DataFrame, y: str, predictor: str, *, n_boot: int, seed: int, confidence: float
) -> CorrectedFit:
    """The equal-geometry slope on error-free AUROC at equal *true* geometry
    (identify.reference_halves; the rows of :func:`equal_geometry`).

    Why: a cell's directions share cos(v, v*) exactly, but v* is an estimate; its error
    along each nuisance moves the direction's true angle to the concept, which moves both
    its AUROC and its effect (the simulation's noisy-reference class reads 'supported'
    with nothing planted). v* is therefore built from one half of the training templates
    and each direction's cosine to the other half's diffmean (``cos_half``) measures its
    true angle with an independent error of the same size as the deviation it measures
    (the halves are exchangeable), so that covariate's within-cell reliability is 1/2 by
    design. AUROC is measured on 40 test texts, its within-cell error variance estimated
    from split halves (``auroc_error_within``). The slope is the method-of-moments
    errors-in-variables estimator with those error variances taken off the cross-product
    matrix (Fuller 1987, §2.2), written here because statsmodels has no EIV regression;
    its interval resamples concepts (percentile), the p-value from the same replicates."""
    moments, names = _cell_moments(data, y, predictor)
    total = moments.sum(axis=0)
    with_cos = bool(total[2] > 1e-12)
    n, g = len(data), len(names)
    reliability = float(1 - total[5] / total[0]) if total[0] > 0 else None
    uncorrected = float(total[3] / total[0]) if total[0] > 0 else None
    facts = {
        "auroc_reliability": reliability,
        "cos_reliability": 0.5 if with_cos else None,
        "uncorrected": uncorrected,
        "beyond_geometry": beyond_geometry(total) if with_cos else None,
    }

    def refused(reason: str) -> CorrectedFit:
        return CorrectedFit(n=n, n_clusters=g, method=CORRECTED, reason=reason, **facts)

    if g < 3:
        return refused(f"{g} concepts have equal-geometry rows (need 3)")
    if reliability is None or reliability < MIN_AUROC_RELIABILITY:
        return refused(
            f"AUROC's reliability inside cells is {reliability} (< {MIN_AUROC_RELIABILITY}): "
            "its measurement error swamps its spread, the correction is unstable"
        )
    estimate = float(_corrected_slope(total[None, :], with_cos)[0])
    draws = np.random.default_rng(seed).integers(0, g, size=(n_boot, g))
    reps = _corrected_slope(moments[draws].sum(axis=1), with_cos)
    finite = reps[np.isfinite(reps)]
    if not np.isfinite(estimate) or len(finite) < 0.975 * n_boot:
        return refused(
            f"the corrected moment matrix is not positive definite in "
            f"{1 - len(finite) / n_boot:.0%} of concept draws: too little reliable AUROC "
            "spread inside cells"
        )
    from scipy.stats import t as student_t

    alpha = (1 - confidence) / 2
    low, high = (float(v) for v in np.quantile(finite, [alpha, 1 - alpha]))
    se = float(finite.std(ddof=1))
    crit = float(student_t.ppf(1 - alpha, g - 1))
    p = float(min(1.0, 2 * min(np.mean(finite <= 0), np.mean(finite >= 0))))
    return CorrectedFit(
        estimate=estimate, low=low, high=high, n=n, n_clusters=g, method=CORRECTED, reason="",
        se=se, t_low=estimate - crit * se, t_high=estimate + crit * se, p_value=p, **facts,
    )  # fmt: skip
