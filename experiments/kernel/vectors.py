"""Stage: the vector set, one steering vector per concept from its probe.

The direction comes from the configured direction source (``steering/directions.py``);
the scale α is the layer's median per-token residual norm on neutral text, so a
strength means the same fraction of the residual norm on any model.

A vector file can instead be steered as it is deployed (``steering.layers``,
``steering.scale``; :class:`Intervention` says what is added where): at every layer it
holds, or a range, each layer's vector either normalised and steered at s·β·α_l (α_l
that layer's own residual norm) or kept with its own norm at s·k (repeng's coefficient).
The run's layer stays the anchor: its α, probes and detection metrics are read there.
Its random null is, per layer, a random direction with the concept vector's norm there.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from experiments.concepts import ConceptGraph
from experiments.config import RunConfig
from experiments.kernel.probes import ProbeSet
from experiments.prompts import scale_neutral_texts
from steering.activations import residual_scale
from steering.directions import DirectionContext, get_direction_source
from steering.models import LoadedModel
from steering.vector import Layers, SteeringVector
from steering.vector_files import LayeredVectors, ModelKind

if TYPE_CHECKING:
    import numpy as np
    import torch


@dataclass(frozen=True)
class Intervention:
    """What a run steering a file as deployed adds, where, and what that is in α·β:
    the record's ``diagnostics.intervention`` and the answer's words.

    At each steered layer l, strength s adds s·k·v_l (``scale: file``, v_l the file's
    vector, k ``coefficient``) or s·β·α_l·v_l/‖v_l‖ (``scale: unit``). Either is, in this
    suite's units, a β per layer: the fraction of that layer's median residual norm α_l
    added at s = 1, k·‖v_l‖/α_l or β (:meth:`betas`); at the run's layer with scale file,
    β = k·‖v‖/α, the β a one-layer unit run would steer the same vector with."""

    layer: int  # the run's layer: α, probes and detection metrics
    layers: tuple[int, ...]  # every steered layer, ascending
    scale: str  # unit | file
    coefficient: float | None  # k with scale file
    beta: float | None  # the config's β (read with scale unit)
    alphas: dict[int, float]  # α_l: each steered layer's median residual norm
    norms: dict[str, dict[int, float]]  # per concept, ‖v_l‖ of the file's vector

    def betas(self) -> dict[str, dict[int, float]]:
        """Per concept and layer, the β the intervention amounts to there (0 where a
        concept's file holds no vector for a layer another concept's holds)."""
        if self.scale != "file":
            beta = float(self.beta or 0.0)
            return {
                c: {n: beta if v else 0.0 for n, v in norms.items()}
                for c, norms in self.norms.items()
            }
        k = float(self.coefficient or 0.0)
        return {
            c: {n: k * v / self.alphas[n] for n, v in norms.items()}
            for c, norms in self.norms.items()
        }

    def to_dict(self) -> dict[str, object]:
        def keyed(values: dict[int, float]) -> dict[str, float]:
            return {str(n): v for n, v in values.items()}

        return {
            "layer": self.layer,
            "layers": list(self.layers),
            "scale": self.scale,
            "coefficient": self.coefficient,
            "beta": self.beta,
            "alphas": keyed(self.alphas),
            "norms": {c: keyed(v) for c, v in self.norms.items()},
            "betas": {c: keyed(v) for c, v in self.betas().items()},
            "adds": "h_l += s·k·v_l (the file's v_l)"
            if self.scale == "file"
            else "h_l += s·β·α_l·v_l/‖v_l‖",
        }


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
    # a file steered as deployed (steering.layers, steering.scale); None: one layer at α·β
    intervention: Intervention | None = None

    def import_diagnostics(self) -> dict[str, object]:
        """The record's ``diagnostics`` entries of an imported run (empty otherwise):
        what reading the file said, and the intervention when steered as deployed."""
        out: dict[str, object] = {}
        if self.import_notes is not None:
            out["imported_vectors"] = self.import_notes
        if self.intervention is not None:
            out["intervention"] = self.intervention.to_dict()
        return out

    @property
    def layers(self) -> Layers:
        """Where the vectors steer: the run's layer, or every steered layer (each
        concept's vector steers the same ones)."""
        first = next(iter(self.vectors.values()), None)
        return self.layer if first is None else first.layers

    def steered(self, order: list[str]) -> torch.Tensor:
        """What the hooks add per unit of coefficient for each of ``order``: ``[n, hidden]``
        (the unit directions, as :meth:`stacked`, for one layer at α·β) or ``[n,
        len(layers), hidden]`` for several (generation's and the export check's tensor)."""
        import torch

        return torch.stack([self.get(k).added() for k in order])

    def get(self, name: str) -> SteeringVector:
        """``synset`` or ``synset|random:j`` (the plan's direction names)."""
        synset, _, arm = name.partition("|")
        return self.random[synset][int(arm.split(":")[1])] if arm else self.vectors[synset]

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
    config: RunConfig,
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


def imported_layers(
    config: RunConfig,
    graph: ConceptGraph,
    hidden_size: int,
    layer: int,
    kind: ModelKind | None = None,
    notes: list[str] | None = None,
    n_layers: int | None = None,
) -> LayeredVectors:
    """``steering.vector_file`` read as deployed (``read_layered_vectors``: every
    concept's vector at the run's layer and at each layer ``steering.layers`` selects)."""
    from steering.vector_files import read_layered_vectors

    steering = config.steering
    assert steering.vector_file is not None  # the config validator ensures it
    return read_layered_vectors(
        steering.vector_file,
        [c.synset for c in graph.concepts],
        [c.name for c in graph.concepts],
        hidden_size,
        layer,
        steering.layers,
        kind,
        notes,
        n_layers,
    )


def as_deployed(config: RunConfig) -> bool:
    """Whether the run steers its vector file as deployed (not one layer at α·β)."""
    return config.steering.layers != "auto" or config.steering.scale != "unit"


def steered_layers(layered: LayeredVectors) -> tuple[int, ...]:
    """Every layer some concept's file holds among those selected: each concept steers
    them all, adding nothing where its own file has no vector."""
    return tuple(sorted({n for held in layered.layers.values() for n in held}))


def deployed_vector(
    vector: SteeringVector,
    held: dict[int, np.ndarray],
    layers: tuple[int, ...],
    alphas: dict[int, float],
    config: RunConfig,
) -> SteeringVector:
    """``vector`` (the concept's unit direction at the run's layer, as the run reads it)
    steering ``layers`` as the file deploys it: per layer the file's own vector times the
    coefficient k (``scale: file``), or its unit direction at that layer's α_l·β (``unit``:
    per unit of the coefficient s·β·α, α_l/α times the unit vector; the run's layer keeps
    its exact unit direction). A layer the concept's file lacks adds zeros."""
    import numpy as np
    import torch

    steering = config.steering
    per_layer: dict[int, torch.Tensor] = {}
    for n in layers:
        v = held.get(n)
        if v is None or not v.any():  # nothing to add at this layer for this concept
            per_layer[n] = torch.zeros_like(vector.direction)
        elif steering.scale == "file":
            per_layer[n] = torch.from_numpy(np.array(v, dtype=np.float32))
        elif n == vector.layer:
            per_layer[n] = vector.direction
        else:
            unit = v.astype(np.float64) / np.linalg.norm(v.astype(np.float64))
            per_layer[n] = torch.from_numpy((unit * (alphas[n] / vector.alpha)).astype(np.float32))
    coefficient = steering.coefficient if steering.scale == "file" else None
    return replace(vector, per_layer=per_layer, coefficient=coefficient)


def deployed_random(
    seed: int, synset: str, vector: SteeringVector, k: int, hidden: int
) -> list[SteeringVector]:
    """The null of a deployed vector: per steered layer a seeded random direction with
    the concept vector's norm there (the run's layer's direction is the one-layer
    null's, :func:`random_directions`), at the same coefficient."""
    assert vector.per_layer is not None
    anchor = random_directions(seed, synset, k, hidden)
    others = {
        n: random_directions(seed, f"{synset}@layer{n}", k, hidden)
        for n in vector.per_layer
        if n != vector.layer
    }
    out = []
    for j in range(k):
        per_layer = {
            n: (anchor[j] if n == vector.layer else others[n][j]) * float(v.double().norm())
            for n, v in vector.per_layer.items()
        }
        out.append(
            replace(
                vector,
                direction=anchor[j],
                source="random",
                meta={},
                per_layer={n: v.float() for n, v in per_layer.items()},
            )
        )
    return out


def concept_vector(
    direction: np.ndarray, layer: int, alpha: float, config: RunConfig
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
    config: RunConfig,
    graph: ConceptGraph,
    probes: ProbeSet,
    layer: int,
    alpha: float,
    model_id: str,
    hidden_size: int,
    context: DirectionContext | None = None,
    kind: ModelKind | None = None,
    notes: list[str] | None = None,
    layered: LayeredVectors | None = None,
    alphas: dict[int, float] | None = None,
) -> dict[str, SteeringVector]:
    """Every concept's vector from the configured source; needs no model, so an export
    rebuilds a finished run's vectors exactly as the run built them (``kind``: the
    loaded model's, to check an imported GGUF's hint; ``notes`` gets what its read said).
    A file steered as deployed needs ``layered`` (:func:`imported_layers`) and ``alphas``
    (α_l per steered layer, measured by :func:`build_vectors`, kept in the record)."""
    source = get_direction_source(config.steering.vector_source)
    ctx = context or DirectionContext(format_axis=probes.format_axis)
    if ctx.imported is None and layered is not None:
        ctx = replace(ctx, imported=layered.anchor)
    if ctx.imported is None and config.steering.vector_source == "file":
        imported = imported_vectors(config, graph, hidden_size, layer, kind, notes)
        ctx = replace(ctx, imported=imported)
    vectors = {}
    for concept in graph.concepts:
        probe = probes.probes[concept.synset]
        probe.check_compatible(model_id, layer)
        vectors[concept.synset] = concept_vector(source(probe, ctx), layer, alpha, config)
    if layered is not None:
        steered = steered_layers(layered)
        missing = [n for n in steered if n not in (alphas or {})]
        if missing:
            raise ValueError(f"no α for the steered layers {missing}: measure them first")
        assert alphas is not None
        vectors = {
            c: deployed_vector(v, layered.layers[c], steered, alphas, config)
            for c, v in vectors.items()
        }
    return vectors


def intervention_of(
    config: RunConfig,
    layer: int,
    layered: LayeredVectors,
    alphas: dict[int, float],
) -> Intervention:
    """What a run steering ``layered`` as deployed adds (its record's words)."""
    import numpy as np

    steered = steered_layers(layered)
    norms = {
        c: {
            n: float(np.linalg.norm(held[n].astype(np.float64))) if n in held else 0.0
            for n in steered
        }
        for c, held in layered.layers.items()
    }
    steering = config.steering
    return Intervention(
        layer=layer,
        layers=steered,
        scale=steering.scale,
        coefficient=steering.coefficient if steering.scale == "file" else None,
        beta=None if steering.beta == "auto" else float(steering.beta),
        alphas={n: alphas[n] for n in steered},
        norms=norms,
    )


def build_vectors(
    config: RunConfig,
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
    k = config.controls.random_directions
    if as_deployed(config):
        layered = imported_layers(config, graph, lm.hidden_size, layer, kind, notes, lm.n_layers)
        texts = neutral_texts(graph, config.seed)  # each steered layer's α_l, as α
        alphas = {
            n: alpha if n == layer else residual_scale(lm, texts, n)
            for n in steered_layers(layered)
        }
        vectors = concept_vectors(
            config, graph, probes, layer, alpha, lm.probe_id, lm.hidden_size, context,
            layered=layered, alphas=alphas,
        )  # fmt: skip
        random = {
            c: deployed_random(config.seed, c, v, k, lm.hidden_size) for c, v in vectors.items()
        }
        intervention = intervention_of(config, layer, layered, alphas)
        return VectorSet(layer, alpha, vectors, random, notes, intervention)
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
            for d in random_directions(config.seed, synset, k, lm.hidden_size)
        ]
        for synset in vectors
    }
    return VectorSet(layer, alpha, vectors, random, notes)
