"""The identified estimator (identify v2, issue 36): does AUROC predict the effect at equal
geometry, whatever shape the effect takes in cos(v, v*)?

The v1 primary pooled every manipulation under concept fixed effects and one straight
line in cos. Then differences between manipulations at equal cos, and curvature of the
effect in cos, load onto AUROC: a toy in which AUROC does nothing reads "supported" when
the effect is concave in cos and "contradicted" when it is convex (``simulate.py``; the
tests keep that failure on record). Here:

* **fixed effects per (concept, manipulation)**: a manipulation may shift a concept's
  effect as a whole without that shift being credited to AUROC;
* **a flexible function of cos with its own shape per manipulation**: a cubic B-spline
  (``spline_df`` ≥ 4 degrees of freedom beyond the fixed effect) per manipulation. AUROC
  is then credited only with what it explains beyond every manipulation's own curve in
  cos: how AUROC differs between concepts and draws at the same cos within a family.
  Where AUROC is one function of the angle for every concept (a rotation family without
  spread), the family carries no information about AUROC and says so (not identified),
  instead of turning curvature into a slope;
* **AUROC and probit(AUROC)** (≈ d′/√2, without the ceiling at 1) as predictors;
* **iso-cos** (:func:`iso_cos`): the designed version of matched pairs: at fixed
  angles, nuisances chosen to spread AUROC; within (concept, angle) beside the nuisance's
  own effect and the dose;
* **matched pairs** (:func:`matched_pairs`): two directions of one concept from
  different manipulations whose cos differ by at most ``tolerance``: the slope of
  Δeffect on ΔAUROC through the origin, no functional form in cos at all;
* **inference with 25 clusters**: the wild cluster bootstrap-t with CR1 standard errors
  (``metrics.cluster``), the F-corrected Wald test for equal slopes across manipulations
  given the flexible cos (``heterogeneity_given_cos``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, cast

import numpy as np
import pandas as pd

from experiments.identify.directions import REFERENCE
from metrics.cluster import (
    ClusterFit,
    cluster_covariance,
    wald_f,
    wild_cluster_restricted,
    wild_cluster_t,
)

# AUROC is clipped to [1/(2·n_pairs), 1 − 1/(2·n_pairs)] before the probit, n_pairs the
# positive × negative pairs of the test split (20 × 20): a perfect detector is then
# probit 2.97, not infinite.
TEST_PAIRS = 400
SPLINE_DF = 4


class _Boot(TypedDict):
    """The bootstrap options every estimate of one study passes on."""

    n_boot: int
    seed: int


class _BootSpline(_Boot):
    spline_df: int


def probit_auroc(auroc: pd.Series | np.ndarray, n_pairs: int = TEST_PAIRS) -> np.ndarray:
    from scipy.stats import norm

    eps = 1 / (2 * n_pairs)
    return cast(np.ndarray, norm.ppf(np.clip(np.asarray(auroc, dtype=np.float64), eps, 1 - eps)))


def log_kl(kl: pd.Series) -> np.ndarray:
    """log next-token KL (the dose), KL floored at 1e-8 nats so an unmoved token is finite."""
    return np.log(np.clip(kl.astype(float).to_numpy(), 1e-8, None))


def with_probit(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.assign(probit_auroc=probit_auroc(frame["auroc"]))


def spline_basis(values: np.ndarray, df: int = SPLINE_DF) -> np.ndarray:
    """A cubic B-spline basis of ``df + 1`` columns on the values' range (a partition of
    unity: with a fixed effect, ``df`` free columns). Uniform knots, so a family with few
    distinct levels gets a rank-deficient basis rather than coincident knots."""
    from sklearn.preprocessing import SplineTransformer

    values = np.asarray(values, dtype=np.float64).reshape(-1, 1)
    if np.ptp(values) == 0:
        return np.ones((len(values), 1))
    n_knots = max(df - 1, 2)  # degree 3: n_knots + 2 columns
    return cast(
        np.ndarray,
        SplineTransformer(n_knots=n_knots, degree=3, knots="uniform").fit_transform(values),
    )


def _demean(block: np.ndarray, groups: np.ndarray) -> np.ndarray:
    _, index = np.unique(groups, return_inverse=True)
    sums = np.zeros((index.max() + 1, block.shape[1]))
    np.add.at(sums, index, block)
    counts = np.bincount(index)[:, None]
    return block - (sums / counts)[index]


def design(
    frame: pd.DataFrame,
    predictors: Sequence[str],
    *,
    family: str = "manipulation",
    cos: str = "cos_ref",
    covariates: Sequence[str] = (),
    spline_df: int = SPLINE_DF,
    by_family: Sequence[str] = (),
) -> tuple[np.ndarray, list[str], np.ndarray]:
    """(X demeaned within (concept, family), its column names, the concept of each row):
    ``predictors`` (each interacted with the family when named in ``by_family``), the
    covariates, and a spline in cos per family."""
    fam = frame[family].astype(str).to_numpy()
    columns: list[np.ndarray] = []
    names: list[str] = []
    families = sorted(set(fam))
    for p in predictors:
        values = frame[p].to_numpy(dtype=np.float64)
        if p in by_family:
            for m in families:
                columns.append(np.where(fam == m, values, 0.0))
                names.append(f"{p}|{m}")
        else:
            columns.append(values)
            names.append(p)
    for c in covariates:
        columns.append(frame[c].to_numpy(dtype=np.float64))
        names.append(c)
    cos_values = frame[cos].to_numpy(dtype=np.float64)
    for m in families:
        mask = fam == m
        basis = spline_basis(cos_values[mask], spline_df)
        for k in range(basis.shape[1]):
            col = np.zeros(len(frame))
            col[mask] = basis[:, k]
            columns.append(col)
            names.append(f"spline[{m}]{k}")
    x = np.column_stack(columns)
    return _demean(x, _groups(frame, family)), names, frame["concept"].astype(str).to_numpy()


def _rows(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    return frame.dropna(subset=list(columns)).reset_index(drop=True)


def flexible_slope(
    frame: pd.DataFrame,
    y: str,
    predictor: str,
    *,
    family: str = "manipulation",
    covariates: Sequence[str] = (),
    spline_df: int = SPLINE_DF,
    n_boot: int = 1999,
    seed: int = 0,
    confidence: float = 0.95,
) -> ClusterFit:
    """The slope of ``y`` on ``predictor`` with (concept, family) fixed effects and a
    spline in cos per family; clustered by concept."""
    data = _rows(frame, ["concept", family, "cos_ref", y, predictor, *covariates])
    if data.empty:
        return wild_cluster_t(np.zeros((0, 1)), np.zeros(0), np.zeros(0))
    x, _, concepts = design(
        data, [predictor], family=family, covariates=covariates, spline_df=spline_df
    )
    yd = _demean(data[[y]].to_numpy(dtype=np.float64), _groups(data, family))[:, 0]
    return wild_cluster_t(x, yd, concepts, 0, n_boot=n_boot, seed=seed, confidence=confidence)


def _groups(frame: pd.DataFrame, family: str) -> np.ndarray:
    return cast(
        np.ndarray,
        frame["concept"].astype(str).to_numpy() + "\x00" + frame[family].astype(str).to_numpy(),
    )


def linear_cos_slope(
    frame: pd.DataFrame,
    y: str,
    predictor: str,
    *,
    n_boot: int = 1999,
    seed: int = 0,
    confidence: float = 0.95,
) -> ClusterFit:
    """The v1 estimator's model (concept fixed effects, one straight line in cos), with the
    same clustered inference: what changes between v1 and v2 is then the model only."""
    data = _rows(frame, ["concept", "cos_ref", y, predictor])
    concepts = data["concept"].astype(str).to_numpy()
    x = _demean(data[[predictor, "cos_ref"]].to_numpy(dtype=np.float64), concepts)
    yd = _demean(data[[y]].to_numpy(dtype=np.float64), concepts)[:, 0]
    return wild_cluster_t(x, yd, concepts, 0, n_boot=n_boot, seed=seed, confidence=confidence)


def per_family_slopes(
    frame: pd.DataFrame,
    y: str,
    predictor: str,
    *,
    family: str = "manipulation",
    spline_df: int = SPLINE_DF,
    n_boot: int = 1999,
    seed: int = 0,
) -> dict[str, Any]:
    """Each family's own slope on ``predictor`` in one flexible model, and the
    F-corrected Wald test that the identified ones are equal (``heterogeneity_given_cos``)."""
    data = _rows(frame, ["concept", family, "cos_ref", y, predictor])
    if data["concept"].nunique() < 3:
        return {"evaluable": False, "reason": f"{data['concept'].nunique()} concepts"}
    x, names, concepts = design(
        data, [predictor], family=family, spline_df=spline_df, by_family=[predictor]
    )
    yd = _demean(data[[y]].to_numpy(dtype=np.float64), _groups(data, family))[:, 0]
    slopes: dict[str, dict[str, object]] = {}
    ids: list[int] = []
    for j, name in enumerate(names):
        if not name.startswith(f"{predictor}|"):
            continue
        m = name.split("|", 1)[1]
        fit = wild_cluster_t(x, yd, concepts, j, n_boot=n_boot, seed=seed)
        slopes[m] = fit.to_dict()
        if fit.evaluable:
            ids.append(j)
    not_identified = sorted(m for m, f in slopes.items() if f["estimate"] is None)
    out: dict[str, Any] = {
        "slopes": slopes,
        "not_identified": not_identified,
        "n_concepts": int(data["concept"].nunique()),
    }
    if len(ids) < 2:
        return {**out, "evaluable": False, "reason": f"{len(ids)} identified slopes"}
    beta, cov = cluster_covariance(x, yd, concepts)
    r = np.zeros((len(ids) - 1, x.shape[1]))
    for i, j in enumerate(ids[1:]):
        r[i, ids[0]], r[i, j] = -1.0, 1.0
    return {**out, **wald_f(beta, cov, r, int(data["concept"].nunique()))}


def matched_pairs(
    frame: pd.DataFrame,
    y: str,
    predictor: str,
    *,
    family: str = "manipulation",
    tolerance: float = 0.02,
    n_boot: int = 1999,
    seed: int = 0,
    confidence: float = 0.95,
) -> dict[str, Any]:
    """Pairs of one concept's directions from different families with |Δcos| ≤ tolerance:
    the slope of Δy on Δpredictor through the origin (invariant to how a pair is
    ordered), clustered by concept (a direction may sit in several pairs)."""
    data = _rows(frame, ["concept", family, "cos_ref", y, predictor])
    dx, dy, who = [], [], []
    for concept, g in data.groupby("concept", sort=True):
        cos = g["cos_ref"].to_numpy(dtype=np.float64)
        fam = g[family].astype(str).to_numpy()
        xv, yv = g[predictor].to_numpy(np.float64), g[y].to_numpy(np.float64)
        i, j = np.triu_indices(len(g), k=1)
        keep = (np.abs(cos[i] - cos[j]) <= tolerance) & (fam[i] != fam[j])
        dx.append(xv[i[keep]] - xv[j[keep]])
        dy.append(yv[i[keep]] - yv[j[keep]])
        who += [str(concept)] * int(keep.sum())
    x = np.concatenate(dx) if dx else np.zeros(0)
    yy = np.concatenate(dy) if dy else np.zeros(0)
    base = {"tolerance": tolerance, "n_pairs": len(x), "n_concepts": len(set(who))}
    if len(set(who)) < 3:
        return {**base, "evaluable": False, "reason": f"{len(set(who))} concepts with pairs"}
    fit = wild_cluster_t(
        x[:, None], yy, np.array(who), 0, n_boot=n_boot, seed=seed, confidence=confidence
    )
    return {**base, "evaluable": fit.evaluable, "fit": fit.to_dict()}


def _fe_slope(
    data: pd.DataFrame, y: str, predictor: str, covariates: Sequence[str], groups: np.ndarray,
    n_boot: int, seed: int,
) -> ClusterFit:  # fmt: skip
    x = _demean(data[[predictor, *covariates]].to_numpy(dtype=np.float64), groups)
    yd = _demean(data[[y]].to_numpy(dtype=np.float64), groups)[:, 0]
    concepts = data["concept"].astype(str).to_numpy()
    return wild_cluster_t(x, yd, concepts, 0, n_boot=n_boot, seed=seed)


def iso_cos(
    frame: pd.DataFrame,
    y: str = "effect",
    predictor: str = "auroc",
    *,
    manipulation: str = "isocos",
    n_boot: int = 1999,
    seed: int = 0,
) -> dict[str, Any]:
    """The iso-cos design: at each angle, the directions of one concept share cos(v, v*)
    exactly and differ only in their nuisance. The slope of the effect on AUROC within
    (concept, angle), beside the nuisance's own effect (the same nuisance steered alone, at
    90°, same β) and, when measured, log next-token KL: per angle and pooled."""
    iso = frame[frame["manipulation"] == manipulation]
    if iso.empty:
        return {"evaluable": False, "reason": "the run has no iso-cos directions"}
    alone = iso[iso["level"] >= 90].set_index(["concept", "seed"])[y]
    rows = iso[iso["level"] < 90].copy()
    rows["nuisance_effect"] = [
        alone.get((c, s), np.nan) for c, s in zip(rows["concept"], rows["seed"], strict=True)
    ]
    covariates = ["nuisance_effect"]
    if "kl" in rows and rows["kl"].notna().any():
        rows["log_kl"] = log_kl(rows["kl"])
        covariates.append("log_kl")
    rows = _rows(rows, ["concept", "level", y, predictor, *covariates])
    out: dict[str, Any] = {
        "covariates": covariates,
        "angles": {},
        "n_concepts": rows["concept"].nunique(),
    }
    for angle, g in rows.groupby("level", sort=True):
        groups = g["concept"].astype(str).to_numpy()
        fit = _fe_slope(g, y, predictor, covariates, groups, n_boot, seed)
        bare = _fe_slope(g, y, predictor, [], groups, n_boot, seed)
        out["angles"][f"{angle:g}"] = {
            "n": len(g), "slope": fit.to_dict(), "without_covariates": bare.to_dict(),
            "auroc_spread": float(g.groupby("concept")[predictor].std().mean()),
        }  # fmt: skip
    groups = _groups(rows, "level")
    out["pooled"] = _fe_slope(rows, y, predictor, covariates, groups, n_boot, seed).to_dict()
    out["evaluable"] = out["pooled"]["estimate"] is not None
    return out


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
        """The fit's fields, the correction's three under ``correction`` (the record's
        ``Correction``, beside the estimate rather than inside the generic estimate)."""
        out = super().to_dict()
        out["correction"] = {
            k: out.pop(k)
            for k in ("auroc_reliability", "cos_reliability", "uncorrected", "beyond_geometry")
        }
        return out


def _cell_moments(data: pd.DataFrame, y: str, predictor: str) -> tuple[np.ndarray, list[str]]:
    """Per concept, the within-cell cross-products [S_aa, S_am, S_mm, S_ay, S_my, D_a]:
    a the predictor, m cos to the other half's diffmean, y the outcome, each less its
    cell's mean; D_a the summed within-cell AUROC error variances."""
    groups = data["cell"].to_numpy()
    cols = _demean(data[[predictor, "cos_half", y]].to_numpy(dtype=np.float64), groups)
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
    if saa <= 0 or smm <= 0:
        return None
    return (saa - da - sam**2 / (smm / 2)) / saa


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
        return CorrectedFit(None, None, None, None, None, None, None, n, g, CORRECTED,
                            reason, **facts)  # fmt: skip

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
    return CorrectedFit(estimate, low, high, se, estimate - crit * se, estimate + crit * se,
                        p, n, g, CORRECTED, "", **facts)  # fmt: skip


def has_second_half(frame: pd.DataFrame) -> bool:
    """Whether a directions table carries what the corrected equal-geometry slope needs."""
    return all(c in frame and frame[c].notna().any() for c in ("cos_half", "auroc_error_within"))


def equal_geometry(
    frame: pd.DataFrame,
    y: str = "effect",
    predictor: str = "auroc",
    *,
    manipulation: str = "isocos",
    n_boot: int = 1999,
    seed: int = 0,
    confidence: float = 0.95,
    corrected: bool = True,
) -> ClusterFit:
    """The equal-geometry estimand (identify v3's primary): among directions at one angle
    to v* (cos(v, v*) = cos θ exactly) whose nuisances were drawn at random for the
    concept, the slope of the outcome on AUROC within (concept, angle, spectrum band)
    cells, bare (no covariate: the nuisance's own effect and the dose are consequences of
    the draw, and adjusting for them changes the question, see docs/identify.md); the
    90° rows (the nuisance alone) are left out; clustered by concept, the interval by
    inverting the restricted wild cluster bootstrap test (``wild_cluster_restricted``).
    Graded nuisances (v2, no ``nuisance_band`` column) are stratified by (concept, angle)
    only. A run with the reference's second half (``identify.reference_halves``) gets the
    slope corrected for AUROC's and the reference's measurement error
    (:func:`equal_geometry_corrected`) unless ``corrected`` is False."""
    from experiments.identify.variance import equal_geometry_rows

    data = equal_geometry_rows(frame, y, predictor, manipulation)
    if data.empty:
        return wild_cluster_t(np.zeros((0, 1)), np.zeros(0), np.zeros(0))
    if corrected and has_second_half(data):
        return equal_geometry_corrected(
            data, y, predictor, n_boot=n_boot, seed=seed, confidence=confidence
        )
    groups = data["cell"].to_numpy()
    x = _demean(data[[predictor]].to_numpy(dtype=np.float64), groups)
    yd = _demean(data[[y]].to_numpy(dtype=np.float64), groups)[:, 0]
    concepts = data["concept"].astype(str).to_numpy()
    return wild_cluster_restricted(
        x, yd, concepts, 0, n_boot=n_boot, seed=seed, confidence=confidence
    )


def identified_analysis(
    frame: pd.DataFrame,
    y: str = "effect",
    *,
    n_boot: int = 1999,
    seed: int = 0,
    spline_df: int = SPLINE_DF,
) -> dict[str, Any]:
    """Everything v2 reports on the pooled directions: the flexible slopes of AUROC and
    probit(AUROC), the v1 model under the same inference, matched pairs, per-family
    slopes and their F test."""
    frame = with_probit(frame)
    if "kl" in frame:  # the dose a direction gives the next token (nats), and its log
        frame = frame.assign(log_kl=log_kl(frame["kl"]))
    kw = _Boot(n_boot=n_boot, seed=seed)
    dosed = (
        {
            "auroc": flexible_slope(
                frame, y, "auroc", covariates=["log_kl"], spline_df=spline_df, **kw
            ).to_dict()
        }
        if "log_kl" in frame and frame["log_kl"].notna().any()
        else {}
    )
    return {
        "model": f"(concept, manipulation) fixed effects + cubic spline in cos(v, v*) per "
        f"manipulation ({spline_df} df)",
        "flexible": {
            p: flexible_slope(frame, y, p, spline_df=spline_df, **kw).to_dict()
            for p in ("auroc", "probit_auroc")
        },
        "given_dose": dosed,  # beside log next-token KL: the dose held as a covariate
        "linear_cos": {p: linear_cos_slope(frame, y, p, **kw).to_dict() for p in ("auroc",)},
        "matched_pairs": {p: matched_pairs(frame, y, p, **kw) for p in ("auroc", "probit_auroc")},
        "heterogeneity_given_cos": per_family_slopes(
            frame[frame["manipulation"] != REFERENCE], y, "auroc", spline_df=spline_df, **kw
        ),
        "iso_cos": iso_cos(frame, y, "auroc", **kw),
        "name_free": (  # detection without the name: AUROC on name-free positives
            {
                "auroc_name_free": flexible_slope(frame, y, "auroc_name_free", **kw).to_dict(),
                "r_auroc": float(
                    cast(float, frame[["auroc", "auroc_name_free"]].corr().iloc[0, 1])
                ),
            }
            if "auroc_name_free" in frame and frame["auroc_name_free"].notna().any()
            else {}
        ),
        "by_strength": {  # the dose varied: the effect at each measured strength × β
            c.removeprefix("effect_at_"): flexible_slope(frame, c, "auroc", **kw).to_dict()
            for c in frame.columns
            if c.startswith("effect_at_")
        },
    }


GOOD_COS = 0.7  # "good" directions for the outcomes' agreement: cos(v, v*) at least this


def subset_outcomes(
    frame: pd.DataFrame,
    subset: Sequence[str],
    *,
    n_boot: int = 1999,
    seed: int = 0,
    spline_df: int = SPLINE_DF,
) -> dict[str, Any]:
    """The stratified subset (exploratory): the flexible AUROC slope on the likelihood
    outcome at 1× β, at each fixed dose (``dose_effect_<k>x``), at the KL-matched dose
    (``dose_effect_matched``) and on the generated outcome (``gen_effect``, Δ gated), the
    last also beside log KL; and how well the two outcomes agree within concepts, over
    every direction and over good ones only (cos ≥ :data:`GOOD_COS`), where agreement
    is not carried by the contrast between v* and far rotations."""
    from experiments.identify.stats import within_correlation

    part = frame[frame["concept"].isin(list(subset))].copy()
    if part.empty:
        return {"evaluable": False, "reason": "no subset"}
    if "kl" in part:
        part = part.assign(log_kl=log_kl(part["kl"]))
    kw = _BootSpline(n_boot=n_boot, seed=seed, spline_df=spline_df)
    doses = [c for c in part.columns if c.startswith("dose_effect_")]
    out: dict[str, Any] = {
        "concepts": sorted(subset),
        "likelihood_1x": flexible_slope(part, "effect", "auroc", **kw).to_dict(),
        "dose": {
            c.removeprefix("dose_effect_"): flexible_slope(part, c, "auroc", **kw).to_dict()
            for c in doses
        },
    }
    if "dose_matched" in part:
        ok = part["dose_matched"].astype(bool)
        out["matched_share"] = float(ok.mean())  # on the prompts the dose was bisected on
        if "dose_kl_kind" in part:  # the KL matched on (identify.dose_kl); v2: "all"
            out["matched_on"] = str(part["dose_kl_kind"].dropna().iloc[0])
        if "dose_matched_verify" in part and part["dose_matched_verify"].notna().any():
            # on held-apart prompts, against v*'s KL there (identify.dose_verify)
            held = part["dose_matched_verify"].dropna().astype(bool)
            out["matched_share_verify"] = float(held.mean())
            out["verify_gap_median"] = float(part["dose_verify_gap"].median())
        out["matched_multiplier"] = {
            m: float(g["dose_multiplier"].median())
            for m, g in part.groupby("manipulation", sort=True)
        }
    if (
        "effect_name_free" in part
        and part["effect_name_free"].notna().any()
        and "auroc_name_free" in part  # no concept with name-free positives: no column
    ):
        out["name_free"] = {  # the outcome without the name; detection with and without
            "auroc": flexible_slope(part, "effect_name_free", "auroc", **kw).to_dict(),
            "auroc_name_free": flexible_slope(
                part, "effect_name_free", "auroc_name_free", **kw
            ).to_dict(),
        }
    if "gen_effect" in part and part["gen_effect"].notna().any():
        out["generated"] = flexible_slope(part, "gen_effect", "auroc", **kw).to_dict()
        if "log_kl" in part:
            out["generated_given_dose"] = flexible_slope(
                part, "gen_effect", "auroc", covariates=["log_kl"], **kw
            ).to_dict()
        both = part.dropna(subset=["gen_effect", "effect"])
        good = both[both["cos_ref"] >= GOOD_COS]
        corr = {"n_boot": n_boot, "seed": seed}
        out["agreement"] = {
            "all": within_correlation(both, "gen_effect", "effect", **corr).to_dict(),
            "good": within_correlation(good, "gen_effect", "effect", **corr).to_dict(),
            "good_n": len(good),
        }
    return out
