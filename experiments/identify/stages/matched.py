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

Two ways the match can flatter itself (issue 53), each with a setting that removes it:

* the KL counts the mass a direction moves onto its concept's own tokens, which is part
  of the outcome: ``identify.dose_kl: concept_free`` matches on the KL with those tokens
  left out (``steering.readout.kl_without``);
* a KL matched on the prompts that set the target is matched there nearly by
  construction: ``identify.dose_verify`` bisects on a seeded half of the prompts
  (:func:`matching_split`) and measures the KL at the matched dose on the other half,
  against v*'s KL on that half (:func:`match_dose`), so the share matched there is a
  check on contexts the bisection never saw.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

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


def log_gap(achieved: np.ndarray, target: float) -> np.ndarray:
    """|log KL_achieved − log KL_target| per direction, both floored at 1e-12 nats."""
    achieved = np.clip(np.asarray(achieved, dtype=np.float64), 1e-12, None)
    gap: np.ndarray = np.abs(np.log(achieved) - np.log(max(float(target), 1e-12)))
    return gap


def matched(achieved: np.ndarray, target: float) -> np.ndarray:
    """Whether each achieved KL is within :data:`MATCH_TOLERANCE` of the target (log)."""
    return log_gap(achieved, target) <= MATCH_TOLERANCE


def matching_split(n: int, seed: int) -> tuple[list[int], list[int]]:
    """The dose's ``n`` prompts (indices) split in two, seeded: the half the bisection
    matches on (the larger when ``n`` is odd) and the half that verifies it, each sorted,
    disjoint, together every prompt. The indices are of the prompt templates, so every
    concept is split alike."""
    if n < 2:
        raise ValueError(f"verifying the dose on other prompts needs at least 2, got {n}")
    order = random.Random(f"dose-split:{seed}").sample(range(n), n)
    half = (n + 1) // 2
    return sorted(order[:half]), sorted(order[half:])


@dataclass(frozen=True)
class Dose:
    """Each direction's KL-matched dose (:func:`match_dose`)."""

    multiplier: np.ndarray  # k per direction (of v*'s β)
    kl: np.ndarray  # the mean KL at k on the matching prompts
    target: float  # v*'s mean KL at β (k = 1) on the matching prompts
    verify_kl: np.ndarray | None = None  # the mean KL at k on the verifying prompts
    verify_target: float | None = None  # v*'s mean KL at β on the verifying prompts

    def verify_gap(self) -> np.ndarray | None:
        """|log KL − log KL_target| on the verifying prompts, per direction."""
        if self.verify_kl is None or self.verify_target is None:
            return None
        return log_gap(self.verify_kl, self.verify_target)


def match_dose(
    kl_at: Callable[[np.ndarray, Sequence[int]], np.ndarray],
    n: int,
    reference: int,
    matching: Sequence[int],
    verifying: Sequence[int] = (),
    *,
    at_one: np.ndarray | None = None,
) -> Dose:
    """Bisect each of ``n`` directions' multiplier k until its mean KL over the prompts
    ``matching`` equals the ``reference`` direction's at k = 1 (:func:`bisect_dose`); then,
    with ``verifying`` prompts, measure every direction's KL at its k there, and the
    reference's at k = 1 there, the target it is checked against.

    ``kl_at(k, prompts) -> [n, len(prompts)]``: each direction's KL at multiplier k on
    those prompts (indices). ``at_one``: the directions' mean KL at k = 1 on ``matching``
    when already measured (the readout's, for the v2 dose); else measured here, on the
    verifying prompts too in the same call."""
    matching, verifying = list(matching), list(verifying)
    if set(matching) & set(verifying):
        raise ValueError("the matching and verifying prompts overlap")
    ones = np.ones(n)
    verify_target: float | None = None
    if at_one is None or verifying:
        per = np.asarray(kl_at(ones, [*matching, *verifying]), dtype=np.float64)
        if at_one is None:
            at_one = per[:, : len(matching)].mean(axis=1)
        if verifying:
            verify_target = float(per[reference, len(matching) :].mean())
    target = float(at_one[reference])
    k, achieved = bisect_dose(
        lambda m: np.asarray(kl_at(m, matching)).mean(axis=1), target, first_guess(at_one, target)
    )
    verify_kl = None
    if verifying:
        verify_kl = np.asarray(kl_at(k, verifying), dtype=np.float64).mean(axis=1)
    return Dose(k, achieved, target, verify_kl, verify_target)
