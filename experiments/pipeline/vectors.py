"""Stage: the vector set, one steering vector per concept from its probe.

The direction comes from the configured direction source (``steering/directions.py``);
the scale α is the layer's median per-token residual norm on neutral text, so a
strength means the same fraction of the residual norm on any model.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    layer: int
    alpha: float
    vectors: dict[str, SteeringVector]

    def numpy_directions(self) -> dict:
        """The unit directions as float64 numpy arrays, by concept."""
        return {k: v.direction.double().cpu().numpy() for k, v in self.vectors.items()}

    def stacked(self, order: list[str]):
        """The unit directions as a ``[concepts, hidden]`` tensor in ``order``."""
        import torch

        return torch.stack([self.vectors[k].direction for k in order])


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
) -> VectorSet:
    import torch

    alpha = residual_scale(lm, neutral_texts(graph, config.seed), layer)
    source = get_direction_source(config.steering.vector_source)
    ctx = context or DirectionContext(format_axis=probes.format_axis)
    vectors = {}
    for concept in graph.concepts:
        probe = probes.probes[concept.synset]
        probe.check_compatible(lm.model_id, layer)
        vectors[concept.synset] = SteeringVector.from_direction(
            torch.as_tensor(source(probe, ctx)),
            layer,
            alpha=alpha,
            beta=config.steering.beta,
            mode=config.steering.mode,
            source=config.steering.vector_source,
        )
    return VectorSet(layer, alpha, vectors)
