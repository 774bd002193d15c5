"""Stage helper: per concept, null vectors from the model's own distribution.

Beside the isotropic random vectors of :class:`~experiments.kernel.vectors.VectorSet`,
k = ``k_neutral`` + ``k_other`` (≥ 4 by default) nulls per concept: diffmeans of random
splits of the neutral texts' activations at the steering layer (the texts α is measured
on) and other concepts' directions (``steering/nulls.py`` says why), every one a unit
direction at the vector set's α and β. Arm names: ``null:neutral:j`` and
``null:other:<synset>``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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
