"""Stage: the vector set, one steering vector per concept from its probe.

The direction comes from the configured direction source (``steering/directions.py``);
the scale α is the layer's median per-token residual norm on neutral text, so a
strength means the same fraction of the residual norm on any model.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from experiments.concepts import ConceptGraph
from experiments.config import ExperimentConfig
from experiments.pipeline.probes import ProbeSet
from experiments.prompts import scale_neutral_texts
from steering.activations import residual_scale
from steering.directions import DirectionContext, get_direction_source
from steering.models import LoadedModel
from steering.vector import SteeringVector


@dataclass
class VectorSet:
    """One vector per concept, plus the concept's random null directions (same α, β)."""

    layer: int
    alpha: float
    vectors: dict[str, SteeringVector]
    random: dict[str, list[SteeringVector]] = field(default_factory=dict)

    def get(self, name: str) -> SteeringVector:
        """``synset`` or ``synset|random:j`` (the plan's direction names)."""
        synset, _, arm = name.partition("|")
        if not arm:
            return self.vectors[synset]
        return self.random[synset][int(arm.split(":")[1])]

    def numpy_directions(self) -> dict:
        """The unit directions as float64 numpy arrays, by concept."""
        return {k: v.direction.double().cpu().numpy() for k, v in self.vectors.items()}

    def stacked(self, order: list[str]):
        """The unit directions as a ``[directions, hidden]`` tensor in ``order``."""
        import torch

        return torch.stack([self.get(k).direction for k in order])


def random_directions(seed: int, synset: str, k: int, hidden: int):
    """``k`` seeded random unit directions for a concept: the null control.

    Uniform on the sphere (normalised Gaussians), seeded by (seed, concept, j) so that
    adding concepts or controls never changes another concept's null.
    """
    import torch

    out = []
    for j in range(k):
        digest = hashlib.sha256(f"{seed}|random-direction|{synset}|{j}".encode()).digest()
        gen = torch.Generator().manual_seed(int.from_bytes(digest[:8], "big") >> 1)
        v = torch.randn(hidden, generator=gen, dtype=torch.float64)
        out.append((v / v.norm()).float())
    return out


def neutral_texts(graph: ConceptGraph, seed: int) -> list[str]:
    """The neutral text α is measured on (the first release's set, so α is unchanged)."""
    return scale_neutral_texts(graph, seed)


def build_vectors(
    config: ExperimentConfig,
    lm: LoadedModel,
    graph: ConceptGraph,
    probes: ProbeSet,
    layer: int,
    context: DirectionContext | None = None,
    alpha: float | None = None,
) -> VectorSet:
    """Vectors from the configured direction source; ``alpha`` reuses a measured scale
    (the calibration study builds many vector sets at one layer)."""
    import torch

    if alpha is None:
        alpha = residual_scale(lm, neutral_texts(graph, config.seed), layer)
    source = get_direction_source(config.steering.vector_source)
    ctx = context or DirectionContext(format_axis=probes.format_axis)
    vectors = {}
    for concept in graph.concepts:
        probe = probes.probes[concept.synset]
        probe.check_compatible(lm.probe_id, layer)
        vectors[concept.synset] = SteeringVector.from_direction(
            torch.as_tensor(source(probe, ctx)),
            layer,
            alpha=alpha,
            beta=config.steering.beta,
            mode=config.steering.mode,
            source=config.steering.vector_source,
        )
    random = {
        synset: [
            SteeringVector.from_direction(
                d,
                layer,
                alpha=alpha,
                beta=config.steering.beta,
                mode=config.steering.mode,
                source="random",
            )
            for d in random_directions(
                config.seed, synset, config.controls.random_directions, lm.hidden_size
            )
        ]
        for synset in vectors
    }
    return VectorSet(layer, alpha, vectors, random)
