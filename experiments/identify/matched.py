"""The dose held (identify v2): each direction's strength bisected to give the next token
the reference direction's KL, and the likelihood outcome at that matched dose and at
other multiples of v*'s β, on a stratified subset of concepts.

Why: every direction of a concept is a unit vector steered at v*'s β, but a unit push
along a top neutral principal component, a whitened axis or another concept moves the
model by different amounts. Log next-token KL as a covariate (``estimator.given_dose``)
holds the dose statistically; here it is held by design: direction d is steered at
k_d·β with k_d chosen so that its mean next-token KL over the concept's prompts equals
v*'s at β. The matched effect then compares directions that move the next-token
distribution equally; the effects at 0.5× and 2× β show the dose-response itself.

The subset: ``identify.subset_concepts`` concepts, stratified by v*'s test AUROC (known
before any outcome), because the matched likelihood costs one more pass per dose.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np

MATCHED = "matched"
# |log KL_achieved − log KL_target| within this counts as matched (a 10% KL difference).
MATCH_TOLERANCE = float(np.log(1.1))


def stratified_subset(values: dict[str, float], n: int, seed: int, strata: int = 3) -> list[str]:
    """``n`` concepts spread evenly over ``strata`` quantile bins of ``values`` (seeded
    choice inside each bin), sorted; all of them when ``n`` ≥ their number."""
    names = sorted(values, key=lambda c: (values[c], c))
    if n >= len(names):
        return sorted(names)
    bins = [list(b) for b in np.array_split(np.array(names, dtype=object), strata)]
    rng = random.Random(seed)
    quota = [n // strata + (1 if i < n % strata else 0) for i in range(strata)]
    chosen = []
    for members, q in zip(bins, quota, strict=True):
        chosen += rng.sample(sorted(members), min(q, len(members)))
    return sorted(chosen)


def bisect_dose(
    kl_at: Callable[[np.ndarray], np.ndarray],
    target: float,
    start: np.ndarray,
    *,
    steps: int = 8,
    span: float = 4.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Per direction, the multiplier k (of the common coefficient) whose KL is ``target``:
    bisection on log k inside [start/span, start·span], all directions in one call of
    ``kl_at(k) -> KL`` per step. Returns (k, KL at k). KL grows with k along a fixed
    direction (it is ≈ quadratic near 0), which bisection needs; a target outside the
    bracket ends at its edge and shows as unmatched (:func:`matched`)."""
    if not target > 0:
        raise ValueError(f"the target KL must be positive, got {target}")
    start = np.asarray(start, dtype=np.float64)
    lo = np.log(start / span)
    hi = np.log(start * span)
    for _ in range(steps):
        mid = (lo + hi) / 2
        below = np.asarray(kl_at(np.exp(mid)), dtype=np.float64) < target
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    k = np.exp((lo + hi) / 2)
    return k, np.asarray(kl_at(k), dtype=np.float64)


def first_guess(kl_at_one: np.ndarray, target: float, limit: float = 16.0) -> np.ndarray:
    """k₀ = √(target / KL(1)): KL is ≈ quadratic in the coefficient for small pushes."""
    ratio = target / np.clip(np.asarray(kl_at_one, dtype=np.float64), 1e-12, None)
    return np.clip(np.sqrt(ratio), 1 / limit, limit)


def matched(achieved: np.ndarray, target: float) -> np.ndarray:
    """Whether each achieved KL is within :data:`MATCH_TOLERANCE` of the target (log)."""
    achieved = np.clip(np.asarray(achieved, dtype=np.float64), 1e-12, None)
    matched: np.ndarray = np.abs(np.log(achieved) - np.log(target)) <= MATCH_TOLERANCE
    return matched
