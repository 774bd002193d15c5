"""Semantic shift Δ = cos(text, core) − cos(text, negative), the seed design's primary metric.

Three centroids per concept (core definitions, boundary relations, distant negatives) are
the means of their texts' embeddings. Δ > 0 means a text sits nearer the concept's core
than its negatives; the change of Δ under steering is what the success criteria judge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

SETS = ("core", "boundary", "negative")
DEFAULT_THRESHOLD = 0.15

SteeringLabel = Literal["toward_core", "neutral", "toward_negative"]


@dataclass(frozen=True, eq=False)  # numpy fields: compare explicitly
class Centroids:
    """Un-normalised mean embeddings of each set, plus the texts they came from (for audit)."""

    core: np.ndarray
    boundary: np.ndarray
    negative: np.ndarray
    texts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def dim(self) -> int:
        return int(self.core.shape[0])


def _mean_row(name: str, rows: np.ndarray) -> np.ndarray:
    """The centroid of one set; an empty or non-2D set is a caller bug, so raise."""
    rows = np.asarray(rows, dtype=np.float64)
    if rows.ndim != 2 or rows.shape[0] == 0:
        raise ValueError(f"Set {name!r} needs a non-empty (n, dim) array, got shape {rows.shape}.")
    if not np.all(np.isfinite(rows)):
        raise ValueError(f"Set {name!r} contains non-finite embeddings.")
    centroid: np.ndarray = rows.mean(axis=0)
    return centroid


def build_centroids(
    embeddings_by_set: Mapping[str, np.ndarray], texts: Mapping[str, Sequence[str]]
) -> Centroids:
    """Average each set's embeddings (keys: core, boundary, negative); pure, no model."""
    missing = [name for name in SETS if name not in embeddings_by_set]
    if missing:
        raise ValueError(f"Missing embedding sets: {missing}; need {list(SETS)}.")
    means = {name: _mean_row(name, embeddings_by_set[name]) for name in SETS}
    dims = {name: vec.shape[0] for name, vec in means.items()}
    if len(set(dims.values())) != 1:
        raise ValueError(f"Embedding sets disagree on dimension: {dims}.")
    frozen_texts = {name: tuple(texts.get(name, ())) for name in SETS}
    return Centroids(texts=frozen_texts, **means)


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity with broadcasting; (n, d) vs (d,) gives (n,).

    Zero vectors have no direction, so they raise instead of yielding NaN. The result is
    clipped to [-1, 1] to absorb rounding.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    norm_a = np.linalg.norm(a, axis=-1)
    norm_b = np.linalg.norm(b, axis=-1)
    if np.any(norm_a == 0) or np.any(norm_b == 0):
        raise ValueError("cosine is undefined for a zero vector.")
    dots = np.sum(a * b, axis=-1)
    cosines: np.ndarray = np.clip(dots / (norm_a * norm_b), -1.0, 1.0)
    return cosines


@dataclass(frozen=True, eq=False)  # numpy fields: compare explicitly
class SemanticScores:
    """Per-text similarities to each centroid and Δ = core_sim − neg_sim."""

    core_sim: np.ndarray
    boundary_sim: np.ndarray
    neg_sim: np.ndarray
    delta: np.ndarray

    def __len__(self) -> int:
        return int(self.delta.shape[0])


def score(text_embeddings: np.ndarray, centroids: Centroids) -> SemanticScores:
    """Score a batch (n, d) of text embeddings (a single (d,) row is promoted to (1, d))."""
    rows = np.atleast_2d(np.asarray(text_embeddings, dtype=np.float64))
    if rows.shape[1] != centroids.dim:
        raise ValueError(f"Text embeddings have dim {rows.shape[1]}, centroids {centroids.dim}.")
    core_sim = cosine(rows, centroids.core)
    neg_sim = cosine(rows, centroids.negative)
    return SemanticScores(
        core_sim=core_sim,
        boundary_sim=cosine(rows, centroids.boundary),
        neg_sim=neg_sim,
        delta=core_sim - neg_sim,
    )


def steering_label(delta: float, threshold: float = DEFAULT_THRESHOLD) -> SteeringLabel:
    """Classify one Δ as in the seed: > +threshold toward core, < −threshold toward negative.

    Exactly ±threshold counts as neutral (the seed's bands are strict inequalities).
    """
    if not np.isfinite(delta):
        raise ValueError(f"Cannot label a non-finite Δ ({delta}).")
    if delta > threshold:
        return "toward_core"
    if delta < -threshold:
        return "toward_negative"
    return "neutral"


def cross_deltas(
    text_embeddings: np.ndarray, centroids: Mapping[str, Centroids], device: str | None = None
) -> dict[str, np.ndarray]:
    """Δ of every text against every concept's centroids (the specificity matrix's input).

    On the CPU (``device`` None or cpu) this is :func:`score` per concept, bit for bit as
    it has always been. On a CUDA device the concepts are stacked and scored as two
    float64 matrix products, which with thousands of concepts is the difference between
    seconds and a loop over concepts; the Δ agree to about 1e-12."""
    if device is None or str(device).startswith("cpu"):
        return {k: score(text_embeddings, c).delta for k, c in centroids.items()}
    return _cross_deltas_torch(text_embeddings, centroids, device)


def _cross_deltas_torch(
    text_embeddings: np.ndarray, centroids: Mapping[str, Centroids], device: str
) -> dict[str, np.ndarray]:
    import torch

    keys = list(centroids)
    rows = torch.as_tensor(
        np.atleast_2d(np.asarray(text_embeddings, dtype=np.float64)), device=device
    )

    def cos(name: str) -> torch.Tensor:
        mat = torch.as_tensor(np.stack([getattr(centroids[k], name) for k in keys]), device=device)
        row_norm, mat_norm = rows.norm(dim=1), mat.norm(dim=1)
        if bool((row_norm == 0).any()) or bool((mat_norm == 0).any()):
            raise ValueError("cosine is undefined for a zero vector.")
        cosines: torch.Tensor = (rows @ mat.T) / (row_norm[:, None] * mat_norm[None, :])
        return cosines.clamp(-1.0, 1.0)

    if not keys:
        return {}
    if rows.shape[1] != centroids[keys[0]].dim:
        raise ValueError(
            f"Text embeddings have dim {rows.shape[1]}, centroids {centroids[keys[0]].dim}."
        )
    delta = (cos("core") - cos("negative")).cpu().numpy()
    return {k: delta[:, j] for j, k in enumerate(keys)}
