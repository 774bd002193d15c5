"""Stage helper: per concept, null vectors from the model's own distribution.

Beside the isotropic random vectors of :class:`~experiments.kernel.vectors.VectorSet`,
k = ``k_neutral`` + ``k_other`` (≥ 4 by default) nulls per concept: diffmeans of random
splits of the neutral texts' activations at the steering layer (the texts α is measured
on) and other concepts' directions (``steering/nulls.py`` says why), every one a unit
direction at the vector set's α and β. Arm names: ``null:neutral:j`` and
``null:other:<synset>``.

A vector steered as deployed (several layers, or a file's own norm: ``per_layer``) gets
nulls of its own shape, as its random null is built (``kernel/vectors.deployed_random``):
per steered layer the null's direction there (the same neutral halving's diffmean at that
layer; the other concept's vector at that layer, normalised) with the concept vector's
norm there, at the concept's coefficient; its ``direction`` is the null's at the run's
layer, the one-layer null's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from experiments.concepts import ConceptGraph
from experiments.kernel.vectors import VectorSet, neutral_texts
from steering.activations import pooled_activations
from steering.models import LoadedModel
from steering.nulls import neutral_split_directions, other_concept_directions
from steering.vector import SteeringVector

if TYPE_CHECKING:
    import numpy as np
    import torch

NEUTRAL_ARM = "null:neutral"
OTHER_ARM = "null:other"


def null_family(arm: str) -> str:
    """The family of an arm name: ``concept``, ``random``, ``null:neutral`` or ``null:other``."""
    if arm.startswith(("null:neutral", "null:other")):
        return ":".join(arm.split(":")[:2])
    return arm.split(":")[0]


def build_model_nulls(
    lm: LoadedModel,
    graph: ConceptGraph,
    vectors: VectorSet,
    seed: int,
    k_neutral: int = 2,
    k_other: int = 2,
) -> dict[str, list[tuple[str, SteeringVector]]]:
    """Per concept: [(arm, vector)], the neutral-split nulls first, then other concepts'."""
    import torch

    some = next(iter(vectors.vectors.values()))
    if some.per_layer is not None:
        return _deployed_nulls(lm, graph, vectors, seed, k_neutral, k_other)
    acts = None
    if k_neutral:
        texts = neutral_texts(graph, seed)
        acts = pooled_activations(lm, texts, vectors.layer).double().numpy()
    directions = vectors.numpy_directions()

    def vector(direction: np.ndarray | torch.Tensor, source: str) -> SteeringVector:
        return SteeringVector.from_direction(
            torch.as_tensor(direction),
            vectors.layer,
            alpha=vectors.alpha,
            beta=some.beta,
            mode=some.mode,
            source=source,
        )

    out: dict[str, list[tuple[str, SteeringVector]]] = {}
    for synset in vectors.vectors:
        nulls = []
        if k_neutral:
            assert acts is not None  # captured above whenever k_neutral
            for j, d in enumerate(neutral_split_directions(acts, k_neutral, seed, synset)):
                nulls.append((f"{NEUTRAL_ARM}:{j}", vector(d, NEUTRAL_ARM)))
        for other, d in other_concept_directions(directions, synset, k_other, seed):
            nulls.append((f"{OTHER_ARM}:{other}", vector(d, OTHER_ARM)))
        out[synset] = nulls
    return out


def _deployed_nulls(
    lm: LoadedModel,
    graph: ConceptGraph,
    vectors: VectorSet,
    seed: int,
    k_neutral: int,
    k_other: int,
) -> dict[str, list[tuple[str, SteeringVector]]]:
    """:func:`build_model_nulls` for vectors steered as deployed (the module docstring)."""
    from dataclasses import replace

    import torch

    some = next(iter(vectors.vectors.values()))
    assert some.per_layer is not None
    layers = sorted(some.per_layer)
    acts = {}
    if k_neutral:
        texts = neutral_texts(graph, seed)
        at = sorted({*layers, vectors.layer})  # the run's layer: the null's direction
        acts = {n: pooled_activations(lm, texts, n).double().numpy() for n in at}
    directions = vectors.numpy_directions()

    def unit_or_zero(v: torch.Tensor) -> torch.Tensor:
        norm = float(v.double().norm())
        return (v.double() / norm).float() if norm > 0 else torch.zeros_like(v).float()

    def shaped(
        vector: SteeringVector, anchor: Any, per: dict[int, torch.Tensor], source: str
    ) -> SteeringVector:
        assert vector.per_layer is not None
        return replace(
            vector,
            direction=unit_or_zero(torch.as_tensor(anchor)),
            source=source,
            meta={},
            per_layer={
                n: (unit_or_zero(per[n]).double() * float(v.double().norm())).float()
                for n, v in vector.per_layer.items()
            },
        )

    out: dict[str, list[tuple[str, SteeringVector]]] = {}
    for synset, vector in vectors.vectors.items():
        nulls = []
        if k_neutral:
            by_layer = {
                n: neutral_split_directions(a, k_neutral, seed, synset) for n, a in acts.items()
            }
            for j in range(k_neutral):
                per = {n: torch.as_tensor(by_layer[n][j]) for n in layers}
                null = shaped(vector, by_layer[vectors.layer][j], per, NEUTRAL_ARM)
                nulls.append((f"{NEUTRAL_ARM}:{j}", null))
        for other, d in other_concept_directions(directions, synset, k_other, seed):
            theirs = vectors.vectors[other].per_layer
            assert theirs is not None  # every concept of a deployed set has per_layer
            per = {n: theirs.get(n, torch.zeros_like(vector.direction)) for n in layers}
            nulls.append((f"{OTHER_ARM}:{other}", shaped(vector, d, per, OTHER_ARM)))
        out[synset] = nulls
    return out
