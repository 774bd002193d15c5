"""Stage: the vector set, one steering vector per concept from its probe.

The direction comes from the configured direction source (``steering/directions.py``);
the scale α is the layer's median per-token residual norm on neutral text, so a
strength means the same fraction of the residual norm on any model.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from experiments.concepts import ConceptGraph
from experiments.config import ExperimentConfig
from experiments.kernel.probes import ProbeSet
from experiments.prompts import scale_neutral_texts
from steering.activations import residual_scale
from steering.directions import DirectionContext, get_direction_source
from steering.models import LoadedModel
from steering.vector import SteeringVector
from steering.vector_files import ModelKind

if TYPE_CHECKING:
    import numpy as np
    import torch


@dataclass
class VectorSet:
    """One vector per concept, plus the concept's random null directions (same α, β)."""

    layer: int
    alpha: float
    vectors: dict[str, SteeringVector]
    random: dict[str, list[SteeringVector]] = field(default_factory=dict)
    # vector_source: file: what reading the file said (the layer taken from a file of
    # several, another model's hint); None for the other sources
    import_notes: list[str] | None = None

    def import_diagnostics(self) -> dict[str, list[str]]:
        """The record's ``diagnostics`` entry of an imported run (empty otherwise)."""
        return {} if self.import_notes is None else {"imported_vectors": self.import_notes}

    def get(self, name: str) -> SteeringVector:
        """``synset`` or ``synset|random:j`` (the plan's direction names)."""
        synset, _, arm = name.partition("|")
        if not arm:
            return self.vectors[synset]
        return self.random[synset][int(arm.split(":")[1])]

    def numpy_directions(self) -> dict[str, np.ndarray]:
        """The unit directions as float64 numpy arrays, by concept."""
        return {k: v.direction.double().cpu().numpy() for k, v in self.vectors.items()}

    def stacked(self, order: list[str]) -> torch.Tensor:
        """The unit directions as a ``[directions, hidden]`` tensor in ``order``."""
        import torch

        return torch.stack([self.get(k).direction for k in order])


def random_directions(seed: int, synset: str, k: int, hidden: int) -> list[torch.Tensor]:
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


def imported_vectors(
    config: ExperimentConfig,
    graph: ConceptGraph,
    hidden_size: int,
    layer: int,
    kind: ModelKind | None = None,
    notes: list[str] | None = None,
) -> dict[str, np.ndarray] | None:
    """The vectors of ``steering.vector_file`` (validated by ``read_vectors``, the one
    validator: the run's and the dry run's), or None for other sources. ``kind``: the
    model a GGUF's ``model_hint`` is checked against; ``notes`` gets what was said."""
    if config.steering.vector_source != "file":
        return None
    from steering.vector_files import read_vectors

    assert config.steering.vector_file is not None  # the config validator ensures it
    return read_vectors(
        config.steering.vector_file,
        [c.synset for c in graph.concepts],
        [c.name for c in graph.concepts],
        hidden_size,
        layer,
        kind,
        notes,
    )


def concept_vector(
    direction: np.ndarray, layer: int, alpha: float, config: ExperimentConfig
) -> SteeringVector:
    """A concept's :class:`SteeringVector`. An imported float32 vector that is already
    unit-norm to float32 precision is kept bit for bit (normalising it again moves the last
    bit of about one vector in thirteen), so an exported run re-imports exactly."""
    import numpy as np
    import torch

    steering = config.steering
    kwargs: dict[str, Any] = dict(
        alpha=alpha, beta=steering.beta, mode=steering.mode, source=steering.vector_source
    )
    array = np.asarray(direction)
    if (
        steering.vector_source == "file"
        and array.dtype == np.float32
        and abs(float(np.linalg.norm(array.astype(np.float64))) - 1.0) <= 1e-6
    ):
        return SteeringVector(direction=torch.from_numpy(array.copy()), layer=layer, **kwargs)
    return SteeringVector.from_direction(torch.as_tensor(direction), layer, **kwargs)


def concept_vectors(
    config: ExperimentConfig,
    graph: ConceptGraph,
    probes: ProbeSet,
    layer: int,
    alpha: float,
    model_id: str,
    hidden_size: int,
    context: DirectionContext | None = None,
    kind: ModelKind | None = None,
    notes: list[str] | None = None,
) -> dict[str, SteeringVector]:
    """Every concept's vector from the configured source; needs no model, so an export
    rebuilds a finished run's vectors exactly as the run built them (``kind``: the
    loaded model's, to check an imported GGUF's hint; ``notes`` gets what its read said)."""
    source = get_direction_source(config.steering.vector_source)
    ctx = context or DirectionContext(format_axis=probes.format_axis)
    if ctx.imported is None and config.steering.vector_source == "file":
        imported = imported_vectors(config, graph, hidden_size, layer, kind, notes)
        ctx = replace(ctx, imported=imported)
    vectors = {}
    for concept in graph.concepts:
        probe = probes.probes[concept.synset]
        probe.check_compatible(model_id, layer)
        vectors[concept.synset] = concept_vector(source(probe, ctx), layer, alpha, config)
    return vectors


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
    if alpha is None:
        alpha = residual_scale(lm, neutral_texts(graph, config.seed), layer)
    kind = ModelKind.of(lm.model.config, type(lm.model).__name__)
    notes: list[str] | None = [] if config.steering.vector_source == "file" else None
    vectors = concept_vectors(
        config, graph, probes, layer, alpha, lm.probe_id, lm.hidden_size, context, kind, notes
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
    return VectorSet(layer, alpha, vectors, random, notes)
