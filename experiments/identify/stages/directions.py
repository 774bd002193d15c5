"""The manipulated directions: detection quality varied around a reference direction.

Pure numpy on pooled residual activations (no model). For every concept the reference
direction v* is the diffmean (positives minus negative-concept texts, the suite's
recipe) at the largest training size; each manipulation moves away from it along one
axis while layer, α·β, prompts, seeds and the test split stay fixed:

* **rotation** (:func:`rotate`): v_θ = cos θ·v* + sin θ·u with u a unit vector ⟂ v*, so
  cos(v_θ, v*) = cos θ exactly. Nuisance families for u: ``isotropic`` (a seeded
  Gaussian draw), ``pc`` (a seeded unit vector in the span of the top principal
  components of neutral-text activations: where activations vary most, so detection
  falls fastest) and ``other`` (another concept's reference direction);
* **label noise** (:func:`swap_labels`): at the reference size, a fraction ρ of the
  positives trade labels with the negative-concept text of the *same template*, so every
  template still holds exactly one label-1 text and the classes stay balanced and
  format-matched; the noisy diffmean and logistic probe are refitted;
* **estimator path**: the logistic probe across its regularisation C
  (``steering.probes.train_probe``), and the shrinkage path
  (:func:`shrinkage_direction`) from diffmean (λ = 1) to the whitened Σ⁻¹Δμ (λ → 0);
* **size**: diffmean at smaller training sizes (the Phase 6 curve, re-measured);
* **iso-cos** (:func:`graded_nuisances`): at fixed angles to v*, one direction per
  nuisance of a set chosen to spread AUROC, and each nuisance alone (90°): AUROC varies
  at fixed geometry, and what the nuisance itself does to the text is measured;
  v3 (:func:`random_nuisances`) draws the nuisances at random per concept instead: a band
  of the covariance spectrum (stratified) and random signs over its eigenvectors, so the
  AUROC left at a fixed (concept, angle, band) is set by a coin, not by a rule shared by
  every concept.
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass, field

import numpy as np

from steering.nulls import seeded_rng, unit
from steering.probes import diffmean_direction, train_probe

REFERENCE = "reference"


def orthogonal_part(u: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """The unit component of ``u`` orthogonal to ``reference`` (Gram–Schmidt, twice for
    round-off)."""
    ref = unit(reference)
    rest = np.asarray(u, dtype=np.float64)
    for _ in range(2):
        rest = rest - (rest @ ref) * ref
    return unit(rest)


def rotate(reference: np.ndarray, nuisance: np.ndarray, degrees: float) -> np.ndarray:
    """v_θ = cos θ·v* + sin θ·u with u the unit part of ``nuisance`` ⟂ v*: a unit
    vector whose cosine to v* is exactly cos θ."""
    v = unit(reference)
    u = orthogonal_part(nuisance, v)
    theta = np.deg2rad(degrees)
    return unit(np.cos(theta) * v + np.sin(theta) * u)


def isotropic_nuisance(hidden: int, seed: int, concept: str, draw: int = 0) -> np.ndarray:
    return unit(seeded_rng(seed, "isotropic", concept, draw).standard_normal(hidden))


def principal_components(activations: np.ndarray, k: int) -> np.ndarray:
    """The top ``k`` principal axes (rows, unit) of centred ``activations``."""
    acts = np.asarray(activations, dtype=np.float64)
    if acts.ndim != 2 or len(acts) < 2:
        raise ValueError(f"PCA needs at least 2 rows, got shape {acts.shape}")
    centred = acts - acts.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    return vt[: min(k, len(vt))]


def pc_nuisance(components: np.ndarray, seed: int, concept: str) -> np.ndarray:
    """A seeded unit vector in the span of ``components`` (each concept its own draw)."""
    weights = seeded_rng(seed, "pc", concept).standard_normal(len(components))
    return unit(weights @ components)


def other_nuisance(
    references: dict[str, np.ndarray],
    concept: str,
    seed: int,
    avoid: set[str] | frozenset[str] = frozenset(),
) -> tuple[str, np.ndarray]:
    """Another concept's reference direction, chosen by a seeded draw: (its concept, it).
    ``avoid``: concepts the draw skips (the concept's own off-concept likelihood texts are
    about them: rotating toward one would raise the off-concept side of the contrast and
    read as a weaker effect), unless no other concept is left."""
    others = sorted(c for c in references if c != concept)
    if not others:
        raise ValueError("the other-concept nuisance needs at least two concepts")
    others = [c for c in others if c not in avoid] or others
    pick = others[int(seeded_rng(seed, "other", concept).integers(len(others)))]
    return pick, references[pick]


@dataclass
class TrainingSet:
    """One concept's training activations at the reference size, with what each text is."""

    features: np.ndarray  # [texts, hidden]
    labels: np.ndarray  # 1 positive, 0 negative or neutral
    kinds: list[str]  # positive | negative | neutral
    templates: list[str]  # the template id of each text (format-matching key)
    order: list[int] = field(default_factory=list)  # position within its kind

    def subset(self, keep: np.ndarray) -> TrainingSet:
        """The texts where ``keep`` is true, in their order."""
        index = np.flatnonzero(keep)
        return TrainingSet(
            self.features[index],
            self.labels[index],
            [self.kinds[i] for i in index],
            [self.templates[i] for i in index],
            [self.order[i] for i in index] if self.order else [],
        )

    def half(self, which: int) -> TrainingSet:
        """One of two template-disjoint halves (:func:`template_halves`)."""
        return self.subset(template_halves(self) == which)

    def prefix(self, n_pos: int, n_neg: int, n_neutral: int) -> TrainingSet:
        """The training set of a smaller size: the first texts of each kind (smaller sizes
        are prefixes of the larger one in experiments.prompts)."""
        limit = {"positive": n_pos, "negative": n_neg, "neutral": n_neutral}
        keep = [o < limit[k] for k, o in zip(self.kinds, self.order, strict=True)]
        return self.subset(np.array(keep, dtype=bool))


def template_halves(data: TrainingSet) -> np.ndarray:
    """Each text's half (0 or 1) of the training set, whole templates to a half (a
    positive and the negative-concept text of its template share their template's
    format, so they go together and the halves' errors stay independent), each kind
    split as evenly as its templates allow: texts are taken kind by kind in order, a
    template new to the split goes to the half holding fewer texts of that kind."""
    half_of: dict[str, int] = {}
    out = np.zeros(len(data.kinds), dtype=int)
    for kind in ("positive", "negative", "neutral"):
        index = sorted(
            (i for i, k in enumerate(data.kinds) if k == kind),
            key=lambda i: data.order[i] if data.order else i,
        )
        counts = [0, 0]
        for i in index:
            template = data.templates[i]
            if template not in half_of:
                half_of[template] = int(counts[1] < counts[0])
            out[i] = half_of[template]
            counts[out[i]] += 1
    return out


def concept_diffmean(data: TrainingSet, labels: np.ndarray | None = None) -> np.ndarray:
    """Positives minus negative-concept texts (all label-0 texts when there are none): the
    suite's diffmean (experiments/kernel/probes.py), with optional replaced labels."""
    labels = data.labels if labels is None else np.asarray(labels, dtype=int)
    keep = np.array([k != "neutral" for k in data.kinds]) if "negative" in data.kinds else None
    if keep is None:
        keep = np.ones(len(labels), dtype=bool)
    return diffmean_direction(data.features[keep], labels[keep])


def swap_labels(data: TrainingSet, rho: float, seed: int, concept: str) -> tuple[np.ndarray, int]:
    """Labels with round(ρ·P) positives swapped with their template's negative-concept text.

    Returns (labels, number of swapped templates). Templates are drawn without
    replacement by a seeded generator; a template without a negative is never drawn.
    """
    labels = data.labels.copy()
    positives = {data.templates[i]: i for i, k in enumerate(data.kinds) if k == "positive"}
    negatives = {data.templates[i]: i for i, k in enumerate(data.kinds) if k == "negative"}
    shared = sorted(set(positives) & set(negatives))
    n_swap = round(rho * len(positives))
    if n_swap > len(shared):
        raise ValueError(f"ρ = {rho} asks for {n_swap} swaps, only {len(shared)} templates pair")
    if n_swap == 0:
        return labels, 0
    chosen = seeded_rng(seed, "label-noise", concept, rho).choice(
        len(shared), n_swap, replace=False
    )
    for index in chosen:
        template = shared[int(index)]
        labels[positives[template]] = 0
        labels[negatives[template]] = 1
    return labels, n_swap


def within_class_covariance(data: TrainingSet, neutral: np.ndarray | None = None) -> np.ndarray:
    """Σ: the covariance of the class-centred training texts (each kind centred on its own
    mean), pooled with the centred neutral-text activations when given (a training set of
    tens of texts in hundreds of dimensions leaves Σ singular; the neutral texts fill in
    where activations vary)."""
    blocks = []
    for kind in sorted(set(data.kinds)):
        rows = data.features[[k == kind for k in data.kinds]]
        blocks.append(rows - rows.mean(axis=0))
    if neutral is not None and len(neutral) > 1:
        blocks.append(neutral - neutral.mean(axis=0))
    centred = np.concatenate(blocks)
    covariance: np.ndarray = centred.T @ centred / max(len(centred) - len(blocks), 1)
    return covariance


def shrinkage_direction(delta: np.ndarray, sigma: np.ndarray, lam: float) -> np.ndarray:
    """unit((λ·σ̄²·I + (1 − λ)·Σ)⁻¹·Δμ), σ̄² = tr Σ / d: λ = 1 is Δμ's direction (diffmean),
    λ → 0 the whitened Σ⁻¹Δμ (Fisher's discriminant), shrunk toward the identity so it
    stays defined when Σ is singular."""
    if not 0 < lam <= 1:
        raise ValueError(f"λ must be in (0, 1], got {lam}")
    d = len(delta)
    scale = float(np.trace(sigma)) / d
    matrix = lam * scale * np.eye(d) + (1 - lam) * sigma
    return unit(np.linalg.solve(matrix, np.asarray(delta, dtype=np.float64)))


def graded_nuisances(
    sigma: np.ndarray, v_star: np.ndarray, delta: np.ndarray, count: int
) -> list[np.ndarray]:
    """``count`` unit nuisances ⟂ v* chosen to spread detection at a fixed angle: the
    discriminative residual (the nearly whitened direction Σ⁻¹Δμ's part ⟂ v*: rotating
    toward it *raises* AUROC) and eigenvectors of Σ at geometrically spaced ranks (1st,
    2nd, 4th, 8th, …: rotating toward a high-variance axis lowers AUROC most, toward a
    low-variance one least). Deterministic: no draw."""
    if count < 1:
        return []
    out = [orthogonal_part(shrinkage_direction(delta, sigma, 0.01), v_star)]
    _, vectors = np.linalg.eigh(sigma)
    descending = vectors[:, ::-1]
    rank = 0
    while len(out) < count and rank < descending.shape[1]:
        with contextlib.suppress(ValueError):  # the axis is v* itself: skip it
            out.append(orthogonal_part(descending[:, rank], v_star))
        rank = 2 * rank + 1 if rank else 1
    return out


def spectrum_bands(hidden: int, bands: int) -> list[tuple[int, int]]:
    """``bands`` log-spaced slices [start, stop) of the descending eigen-ranks 0…hidden−1:
    the top axes alone, then ever wider slices of the tail (640 dims, 4 bands: 0–4, 5–24,
    25–126, 127–639)."""
    if bands < 1 or hidden < bands:
        raise ValueError(f"need 1 <= bands <= hidden, got bands={bands}, hidden={hidden}")
    edges = np.unique(np.round(np.geomspace(1, hidden + 1, bands + 1)).astype(int) - 1)
    if len(edges) != bands + 1:  # tiny widths: fall back to equal slices
        edges = np.linspace(0, hidden, bands + 1).astype(int)
    edges[-1] = hidden
    return [(int(a), int(b)) for a, b in itertools.pairwise(edges)]


def random_nuisances(
    sigma: np.ndarray, v_star: np.ndarray, count: int, bands: int, seed: int, concept: str
) -> list[tuple[np.ndarray, int]]:
    """``count`` unit nuisances ⟂ v* drawn for one concept (identify v3), each with its
    band: draw k takes band k mod ``bands`` of :func:`spectrum_bands` (so every concept
    has the same number per band: the band is a stratum, held fixed by the estimator) and
    a random ±1 sign on each of that band's covariance eigenvectors. Within a band, how
    much the nuisance cancels or adds to the noise along v* (v*ᵀΣu, which sets the AUROC
    at a fixed angle) depends on the signs only: a coin per concept and draw
    (:func:`seeded_rng`), not one rule every concept shares as the graded set is."""
    if count < 1:
        return []
    _, vectors = np.linalg.eigh(np.asarray(sigma, dtype=np.float64))
    descending = vectors[:, ::-1]
    slices = spectrum_bands(descending.shape[1], bands)
    out = []
    for k in range(count):
        band = k % bands
        start, stop = slices[band]
        signs = seeded_rng(seed, "isocos-random", concept, k).choice([-1.0, 1.0], stop - start)
        out.append((orthogonal_part(descending[:, start:stop] @ signs, v_star), band))
    return out


def logistic_direction(features: np.ndarray, labels: np.ndarray, c: float, seed: int) -> np.ndarray:
    """The unit weight of the suite's logistic probe (centred, one global scale, balanced)."""
    weight, _bias = train_probe(features, labels, seed=seed, c=c)
    return unit(weight)


@dataclass(frozen=True)
class DirectionSpec:
    """One manipulated direction: ``id`` names it (``rotation:pc:45``, ``noise:0.2:1``,
    ``logistic:0.1``, ``shrinkage:0.01``, ``size:2x2x2``, ``null:0``; ``reference`` is v*),
    ``manipulation`` the axis and ``level`` its position on it."""

    id: str
    manipulation: str
    level: float
    seed: int | None = None
    detail: str = ""
