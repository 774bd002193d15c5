"""Cluster-robust inference for a linear model with few clusters.

The identification study has 25 concepts: 25 clusters. A concept-bootstrap percentile
interval of a regression slope is too narrow with so few clusters, and a Wald statistic
referred to χ² overstates significance (issue 36: p = 0.0005 where the small-sample F
gives 0.025). Here:

* :func:`cluster_covariance`: the CR1 sandwich (the Stata / statsmodels small-sample
  factor G/(G−1)·(N−1)/(N−K)), the covariance the F-corrected Wald test uses;
* :func:`wild_cluster_t`: one coefficient's estimate, its CR1 standard error, the t(G−1)
  interval, and the **wild cluster bootstrap-t** interval and p-value (Webb's six-point
  weights, residuals unrestricted: Cameron, Gelbach & Miller 2008; Webb 2014), the
  reference for few clusters;
* :func:`wild_cluster_restricted`: the same coefficient with the restricted wild cluster
  bootstrap and its interval by test inversion (identify v3's primary);
* :func:`wald_f`: linear restrictions on the coefficients, W/q referred to F(q, G−1).

Why by hand: statsmodels gives CR1 (its ``cov_type="cluster"``, which the tests hold
this module to) but no wild cluster bootstrap, and the ``wildboottest`` package is not a
dependency worth adding for forty lines. The bootstrap is vectorised in closed form:
with β̂ = A·X'y (A the pseudo-inverse of X'X), a replicate that multiplies cluster g's
residuals by w_g moves the coefficients by A·Σ_g w_g·S_g (S_g = X_g'û_g) and its own
cluster scores are w_g·s_g − Σ_h w_h·(q_g·S_h), q_g = A·X_g'x̃_g; so every replicate is
two small matrix products, with no refit. The design may be rank-deficient (spline
columns that a family's few distinct levels cannot all carry): the pseudo-inverse gives
the unique least-squares fit, and a coefficient whose column lies in the span of the
others is reported as not identified instead of a number.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from metrics.intervals import Interval

# Webb's six-point distribution: mean 0, variance 1, many more distinct sign patterns
# than Rademacher's two points when clusters are few.
WEBB = np.array([-np.sqrt(1.5), -1.0, -np.sqrt(0.5), np.sqrt(0.5), 1.0, np.sqrt(1.5)])
METHOD = "wild cluster bootstrap-t (Webb weights), CR1 standard errors, clusters = concepts"


@dataclass(frozen=True)
class ClusterFit(Interval):
    """One coefficient of a clustered OLS fit: the wild cluster bootstrap interval in
    ``low``/``high``, and beside it the CR1 standard error, the t(G−1) interval and the
    bootstrap p-value."""

    method: str = METHOD
    se: float | None = None  # CR1
    t_low: float | None = None  # estimate ± t(G−1)·se
    t_high: float | None = None
    p_value: float | None = None  # wild cluster bootstrap-t, two-sided, H0: coefficient = 0


def _not_identified(reason: str, n: int, g: int) -> ClusterFit:
    return ClusterFit(n=n, n_clusters=g, reason=reason)


def _prepare(
    x: np.ndarray, y: np.ndarray, clusters: Sequence[object] | np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    if len(x) != len(y) or len(y) != len(clusters):
        raise ValueError(f"rows differ: X {len(x)}, y {len(y)}, clusters {len(clusters)}")
    _, index = np.unique(np.asarray(clusters), return_inverse=True)
    return x, y, index


def _fit(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(A = (X'X)⁺, β̂, residuals, rank), the pseudo-inverse and rank from one eigh."""
    values, vectors = np.linalg.eigh(x.T @ x)
    keep = values > 1e-10 * max(float(values.max(initial=0.0)), 1e-300)
    a = (vectors[:, keep] / values[keep]) @ vectors[:, keep].T
    beta = a @ (x.T @ y)
    return a, beta, y - x @ beta, int(keep.sum())


def _small_sample(n: int, g: int, k: int) -> float:
    return g / (g - 1) * (n - 1) / max(n - k, 1)


def identified(x: np.ndarray, j: int, tol: float = 1e-8) -> bool:
    """Whether column j is not (numerically) in the span of the other columns: its
    residual sum of squares on them, from the Gram matrix (K × K, not N × K)."""
    x = np.asarray(x, dtype=np.float64)
    gram = x.T @ x
    norm = float(gram[j, j])
    if norm == 0:
        return False
    rest = np.delete(np.arange(len(gram)), j)
    if len(rest) == 0:
        return True
    cross = gram[rest, j]
    inv = np.linalg.pinv(gram[np.ix_(rest, rest)], rcond=1e-10, hermitian=True)
    return norm - float(cross @ inv @ cross) > tol * norm


def cluster_covariance(
    x: np.ndarray, y: np.ndarray, clusters: Sequence[object] | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(β̂, the CR1 covariance of β̂)."""
    x, y, index = _prepare(x, y, clusters)
    a, beta, resid, rank = _fit(x, y)
    g = int(index.max()) + 1
    scores = np.zeros((g, x.shape[1]))
    np.add.at(scores, index, x * resid[:, None])
    meat = scores.T @ scores
    return beta, _small_sample(len(y), g, rank) * a @ meat @ a


def wild_cluster_t(
    x: np.ndarray,
    y: np.ndarray,
    clusters: Sequence[object] | np.ndarray,
    j: int = 0,
    *,
    n_boot: int = 1999,
    seed: int = 0,
    confidence: float = 0.95,
) -> ClusterFit:
    """Coefficient j of the OLS of y on X (no intercept added: demean first), clustered."""
    from scipy.stats import t as student_t

    x, y, index = _prepare(x, y, clusters)
    n, g = len(y), int(index.max()) + 1 if len(y) else 0
    if g < 3:
        return _not_identified(f"{g} clusters", n, g)
    if not identified(x, j):
        return _not_identified("the predictor lies in the span of the other columns", n, g)
    a, beta, resid, rank = _fit(x, y)
    c = _small_sample(n, g, rank)
    scores_full = np.zeros((g, x.shape[1]))  # S_g = X_g' û_g
    np.add.at(scores_full, index, x * resid[:, None])
    row = a[j]  # β̂_j − β_j = row · Σ_g S_g
    s = scores_full @ row  # the cluster scores of coefficient j
    se = float(np.sqrt(c * (s @ s)))
    estimate = float(beta[j])
    if not np.isfinite(se) or se == 0:
        return _not_identified("zero cluster-robust standard error", n, g)
    # q_g·S_h for every pair: the cluster-g part of coefficient j's influence of cluster h.
    q = np.zeros((g, x.shape[1]))
    np.add.at(q, index, x * (x @ row)[:, None])  # X_g' X_g a_j, summed within cluster
    cross = scores_full @ (a @ q.T)  # [h, g] = S_h · A X_g'X_g a_j
    w = np.random.default_rng(seed).choice(WEBB, size=(n_boot, g))
    delta = w @ s  # β*_j − β̂_j per replicate
    star = w * s[None, :] - w @ cross  # replicate cluster scores of coefficient j
    se_star = np.sqrt(c * (star**2).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        t_star = delta / se_star
    t_star = t_star[np.isfinite(t_star)]
    alpha = (1 - confidence) / 2
    lo_q, hi_q = np.quantile(t_star, [alpha, 1 - alpha])
    crit = float(student_t.ppf(1 - alpha, g - 1))
    t_hat = estimate / se
    return ClusterFit(
        estimate=estimate,
        low=estimate - float(hi_q) * se,
        high=estimate - float(lo_q) * se,
        n=n,
        n_clusters=g,
        se=se,
        t_low=estimate - crit * se,
        t_high=estimate + crit * se,
        p_value=float((np.abs(t_star) >= abs(t_hat)).mean()),
    )


def wild_cluster_restricted(
    x: np.ndarray,
    y: np.ndarray,
    clusters: Sequence[object] | np.ndarray,
    j: int = 0,
    *,
    n_boot: int = 1999,
    seed: int = 0,
    confidence: float = 0.95,
    tolerance: float = 1e-4,
) -> ClusterFit:
    """Coefficient j with the **restricted** wild cluster bootstrap (WCR: residuals from
    the fit with β_j held at the tested value), its interval by **test inversion**: the
    values b whose WCR test of β_j = b has p ≥ 1 − confidence (MacKinnon & Webb 2017;
    Roodman et al. 2019, ``boottest``). With few clusters WCR keeps its level where the
    unrestricted bootstrap-t (:func:`wild_cluster_t`) can over-reject. The statistic at b
    is (β̂_j − b)/se (the CR1 se of the unrestricted fit); its replicates come in closed
    form, since the restricted residuals are linear in b: u(b) = M₋ⱼ·y − b·M₋ⱼ·xⱼ.
    The same weights serve every b, so p(b) is a step function searched by bisection
    between the estimate (p = 1) and where p falls below the level."""
    from scipy.stats import t as student_t

    base = wild_cluster_t(x, y, clusters, j, n_boot=n_boot, seed=seed, confidence=confidence)
    if not base.evaluable or base.se is None or base.estimate is None:
        return base
    x, y, index = _prepare(x, y, clusters)
    n, g = len(y), int(index.max()) + 1
    a, _, _, rank = _fit(x, y)
    c = _small_sample(n, g, rank)
    row = a[j]
    rest = np.delete(x, j, axis=1)
    if rest.shape[1]:
        coef_y, *_ = np.linalg.lstsq(rest, y, rcond=None)
        coef_x, *_ = np.linalg.lstsq(rest, x[:, j], rcond=None)
        u_y, u_x = y - rest @ coef_y, x[:, j] - rest @ coef_x
    else:
        u_y, u_x = y, x[:, j]
    q = np.zeros((g, x.shape[1]))
    np.add.at(q, index, x * (x @ row)[:, None])
    aq = a @ q.T

    def parts(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        scores = np.zeros((g, x.shape[1]))
        np.add.at(scores, index, x * u[:, None])
        return scores @ row, scores @ aq  # s_g and cross[h, g]

    s_y, cross_y = parts(u_y)
    s_x, cross_x = parts(u_x)
    w = np.random.default_rng(seed).choice(WEBB, size=(n_boot, g))
    level = 1 - confidence
    estimate, se = base.estimate, base.se

    def p_value(b: float) -> float:
        s0, cross0 = s_y - b * s_x, cross_y - b * cross_x
        delta = w @ s0
        star = w * s0[None, :] - w @ cross0
        with np.errstate(invalid="ignore", divide="ignore"):
            t_star = delta / np.sqrt(c * (star**2).sum(axis=1))
        t_star = t_star[np.isfinite(t_star)]
        return float((np.abs(t_star) >= abs((estimate - b) / se)).mean()) if len(t_star) else 0.0

    def bound(direction: float) -> float | None:
        inside, step = estimate, direction * 2 * se
        outside = estimate + step
        for _ in range(40):  # widen until the test rejects
            if p_value(outside) < level:
                break
            inside, step = outside, 2 * step
            outside = estimate + step
        else:
            return None
        while abs(outside - inside) > tolerance * se:
            middle = (inside + outside) / 2
            inside, outside = (middle, outside) if p_value(middle) >= level else (inside, middle)
        return (inside + outside) / 2

    crit = float(student_t.ppf(1 - level / 2, g - 1))
    return ClusterFit(
        estimate=estimate, low=bound(-1.0), high=bound(1.0), n=n, n_clusters=g,
        method="wild cluster restricted bootstrap (WCR, Webb weights), interval by test "
        "inversion, CR1 standard errors, clusters = concepts",
        se=se, t_low=estimate - crit * se, t_high=estimate + crit * se, p_value=p_value(0.0),
    )  # fmt: skip


def wald_f(
    beta: np.ndarray, covariance: np.ndarray, restrictions: np.ndarray, n_clusters: int
) -> dict[str, Any]:
    """H0: R·β = 0. W = (Rβ)'(R V R')⁺(Rβ) on the restrictions' non-null space, F = W/q
    referred to F(q, G−1) (the small-sample reference with G clusters), χ² beside it."""
    from scipy.stats import chi2, f

    r = np.atleast_2d(np.asarray(restrictions, dtype=np.float64))
    d = r @ beta
    cov = r @ covariance @ r.T
    values, vectors = np.linalg.eigh(cov)
    keep = values > 1e-10 * max(float(values.max()), 1e-300)
    if not keep.any() or n_clusters < 3:
        return {"evaluable": False, "reason": "no restriction varies, or too few clusters"}
    projected = vectors[:, keep].T @ d
    stat = float((projected**2 / values[keep]).sum())
    q = int(keep.sum())
    df2 = n_clusters - 1
    return {
        "evaluable": True,
        "wald": stat,
        "df": q,
        "F": stat / q,
        "df_denominator": df2,
        "p_value": float(f.sf(stat / q, q, df2)),
        "p_value_chi2": float(chi2.sf(stat, q)),
        "method": f"CR1 Wald, F({q}, {df2}) with G = {n_clusters} clusters",
    }
