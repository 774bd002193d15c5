"""Null directions from the model's own distribution, beside the isotropic random null.

An isotropic random unit direction is off the data manifold: the model tolerates it far
worse than a concept direction (29-41% of texts pass the coherence gate against 79-80%),
so "above the random null" partly rewards any direction the model tolerates. Two nulls
that the model's activations themselves produce, used at the same α·β:

* **neutral splits**: the difference of means of a random half of neutral-text
  activations and the other half. It lies where neutral activations vary, as a concept
  diffmean does, but carries no concept (the halves are exchangeable);
* **other concepts' directions**: concept B's direction steered and scored as if it
  were A's. It is a real, tolerated concept direction, just the wrong one, so an effect
  above it is specific to A (the specificity margin, as a null).

Each draw is seeded by (seed, concept, j), like the isotropic null, so adding concepts
or draws never changes another concept's nulls.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import numpy as np


def seeded_rng(*parts: object) -> np.random.Generator:
    """A generator seeded by the parts' text, so a draw never depends on call order (every
    seeded draw of a direction, here and in identify's manipulations)."""
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "big"))


def unit(vector: np.ndarray) -> np.ndarray:
    """``vector`` over its norm, in float64; a zero or non-finite direction is an error."""
    vector = np.asarray(vector, dtype=np.float64)
    norm = float(np.linalg.norm(vector))
    if not np.isfinite(norm) or norm == 0:
        raise ValueError("a direction is zero or not finite")
    return vector / norm


def neutral_split_directions(
    activations: np.ndarray, k: int, seed: int, key: str
) -> list[np.ndarray]:
    """``k`` unit diffmeans mean(half A) − mean(half B) of random halvings of the rows of
    ``activations`` (neutral texts × hidden), draw j seeded by (seed, key, j)."""
    acts = np.asarray(activations, dtype=np.float64)
    if acts.ndim != 2 or len(acts) < 4:
        raise ValueError(f"need at least 4 neutral activations (rows), got shape {acts.shape}")
    half = len(acts) // 2
    out = []
    for j in range(k):
        order = seeded_rng(seed, "neutral-split", key, j).permutation(len(acts))
        a, b = order[:half], order[half : 2 * half]
        out.append(unit(acts[a].mean(axis=0) - acts[b].mean(axis=0)))
    return out


def other_concept_directions(
    directions: Mapping[str, np.ndarray], concept: str, k: int, seed: int
) -> list[tuple[str, np.ndarray]]:
    """``k`` other concepts' unit directions for ``concept`` as (their concept, direction),
    a seeded choice among the others in sorted order (independent of the mapping's order)."""
    others = sorted(c for c in directions if c != concept)
    if k > len(others):
        raise ValueError(f"{concept}: {k} other-concept nulls asked, {len(others)} others exist")
    picked = seeded_rng(seed, "other-concept", concept).choice(len(others), size=k, replace=False)
    return [(others[i], unit(directions[others[i]])) for i in sorted(picked)]
