"""What the identification study measures on: activations, splits and the directions.

One forward pass (to the steering layer) embeds every text the study needs: each
concept's training texts at the reference size (smaller sizes are prefixes of it), its
validation and test splits (held fixed for every direction) and the neutral texts whose
principal components are the ``pc`` nuisance family and whose covariance the shrinkage
path whitens with. :func:`build_directions` then makes every direction of
:func:`experiments.identify.stages.manipulations.direction_grid` for every concept.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from experiments.concepts import ConceptGraph
from experiments.config import IdentifyStudyConfig
from experiments.identify.stages.directions import (
    REFERENCE,
    DirectionSpec,
    TrainingSet,
    concept_diffmean,
    graded_nuisances,
    isotropic_nuisance,
    other_nuisance,
    pc_nuisance,
    principal_components,
    random_nuisances,
    within_class_covariance,
)
from experiments.identify.stages.manipulations import ConceptInputs, build_direction, direction_grid
from experiments.prompts import (
    ProbeExample,
    format_axis_texts,
    probe_eval_set,
    probe_training_set,
    scale_neutral_texts,
)
from steering.nulls import unit
from steering.probes import TrainSpec
from steering.vector import Direction

if TYPE_CHECKING:
    from collections.abc import Callable


@dataclass
class ConceptData:
    """One concept's activations: training set (reference size), validation and test."""

    concept: str
    train: TrainingSet
    validation: tuple[np.ndarray, np.ndarray]
    test: tuple[np.ndarray, np.ndarray]


@dataclass
class StudyData:
    concepts: dict[str, ConceptData]
    neutral: np.ndarray  # pooled activations of the neutral texts [texts, hidden]
    neutral_texts: list[str] = field(default_factory=list)


def neutral_study_texts(graph: ConceptGraph, seed: int) -> list[str]:
    """Concept-free texts: the format-axis question/statement pairs and the α-scale set."""
    questions, statements = format_axis_texts(graph)
    return sorted({*questions, *statements, *scale_neutral_texts(graph, seed)})


def collect(
    config: IdentifyStudyConfig,
    graph: ConceptGraph,
    concepts: Sequence[str],
    embed: Callable[[list[str]], np.ndarray],
) -> StudyData:
    """Texts per concept and their pooled activations; ``embed(texts) -> [n, hidden]``
    (one call, so one pass over the model)."""
    spec = TrainSpec.parse(config.identify.reference_size)
    seed, n_eval = config.seed, config.classifier.eval_per_class
    sets = {}
    for synset in concepts:
        concept = graph.get(synset)
        sets[synset] = (
            probe_training_set(concept, graph, spec.n_pos, spec.n_neg, spec.n_neutral, seed),
            probe_eval_set(concept, graph, n_eval, seed, split="validation"),
            probe_eval_set(concept, graph, n_eval, seed, split="test"),
        )
    neutral = neutral_study_texts(graph, seed)
    texts = sorted({e.text for s in sets.values() for part in s for e in part} | set(neutral))
    row = {t: i for i, t in enumerate(texts)}
    features = np.asarray(embed(texts), dtype=np.float64)

    def rows(examples: Sequence[ProbeExample]) -> tuple[np.ndarray, np.ndarray]:
        return features[[row[e.text] for e in examples]], np.array([e.label for e in examples])

    out = {}
    for synset, (train, validation, test) in sets.items():
        x, y = rows(train)
        templates = [e.source.split(":")[3] for e in train]  # split:kind:format:tNN:synset
        seen: dict[str, int] = {}
        order = []
        for e in train:
            order.append(seen.get(e.kind, 0))
            seen[e.kind] = order[-1] + 1
        out[synset] = ConceptData(
            synset,
            TrainingSet(x, y, [e.kind for e in train], templates, order),
            rows(validation),
            rows(test),
        )
    return StudyData(out, features[[row[t] for t in neutral]], neutral)


@dataclass
class DirectionSet:
    """Every concept's directions (:class:`steering.vector.Direction`, float64, in the
    grid's order), the specs they were built from and, with ``identify.reference_halves``,
    each concept's diffmean from the other half of its templates (v* is the first's); with
    ``identify.geometry_texts: validation``, its unit diffmean of the validation texts."""

    specs: list[DirectionSpec]
    by_concept: dict[str, dict[str, Direction]]
    second_half: dict[str, np.ndarray] = field(default_factory=dict)
    validation: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def concepts(self) -> list[str]:
        return list(self.by_concept)

    def __iter__(self) -> Iterator[Direction]:
        """Every direction, concept by concept, each concept's in the grid's order."""
        return (d for mine in self.by_concept.values() for d in mine.values())

    def of(self, concept: str) -> list[Direction]:
        """One concept's directions, in the grid's order."""
        return list(self.by_concept[concept].values())

    def get(self, concept: str, id: str) -> Direction:
        return self.by_concept[concept][id]

    def has(self, concept: str, id: str) -> bool:
        """Whether the concept has that direction (a concept alone has no ``other``)."""
        return id in self.by_concept[concept]

    def reference(self, concept: str) -> Direction:
        """The concept's v*."""
        return self.by_concept[concept][REFERENCE]

    def across(self, id: str, concepts: Iterable[str]) -> list[Direction]:
        """The direction ``id`` of each of ``concepts`` (each must have it)."""
        return [self.by_concept[c][id] for c in concepts]

    def only(self, concepts: Iterable[str]) -> DirectionSet:
        """The same, with the directions of ``concepts`` alone."""
        return replace(self, by_concept={c: self.by_concept[c] for c in concepts})


def build_directions(
    config: IdentifyStudyConfig, data: StudyData, avoid: dict[str, set[str]] | None = None
) -> DirectionSet:
    """v* per concept and every manipulated direction around it (see manipulations.py);
    ``avoid[concept]``: concepts its ``other`` nuisance must not be (those its own
    off-concept likelihood texts are about)."""
    ident = config.identify
    seed = config.seed
    specs = direction_grid(ident)
    if ident.reference_halves:  # v* from one half of the templates, a check from the other
        references = {c: concept_diffmean(d.train.half(0)) for c, d in data.concepts.items()}
        second = {c: unit(concept_diffmean(d.train.half(1))) for c, d in data.concepts.items()}
    else:
        references = {c: concept_diffmean(d.train) for c, d in data.concepts.items()}
        second = {}
    components = principal_components(data.neutral, ident.pc_components)
    by_concept: dict[str, dict[str, Direction]] = {}
    for concept, d in data.concepts.items():
        v_star = references[concept]
        other_name, other = (
            other_nuisance(references, concept, seed, (avoid or {}).get(concept, set()))
            if len(references) > 1
            else (None, None)
        )
        nuisance = {
            "isotropic": isotropic_nuisance(len(v_star), seed, concept),
            "pc": pc_nuisance(components, seed, concept),
        }
        if other is not None:
            nuisance["other"] = other
        keep = np.array([k != "neutral" for k in d.train.kinds])
        labels_pn = d.train.labels[keep]
        x_pn = d.train.features[keep]
        inputs = ConceptInputs(
            concept,
            seed,
            v_star,
            d.train,
            nuisance,
            other_name,
            sigma=within_class_covariance(d.train, data.neutral),
            delta=x_pn[labels_pn == 1].mean(axis=0) - x_pn[labels_pn == 0].mean(axis=0),
        )
        if ident.isocos_nuisances and ident.isocos_draw == "random":
            drawn = random_nuisances(
                inputs.sigma, v_star, max(ident.isocos_nuisances) + 1, ident.isocos_bands,
                seed, concept,
            )  # fmt: skip
            inputs.graded = [u for u, _ in drawn]
            inputs.bands = [band for _, band in drawn]
        elif ident.isocos_nuisances:
            inputs.graded = graded_nuisances(
                inputs.sigma, v_star, inputs.delta, max(ident.isocos_nuisances) + 1
            )
        mine: dict[str, Direction] = {}
        for spec in specs:
            built = build_direction(spec, inputs)
            if built is None:
                continue
            vector, facts = built
            mine[spec.id] = Direction.of(concept, spec.id, unit(vector), facts=facts or {})
        by_concept[concept] = mine
    present = {i for mine in by_concept.values() for i in mine}
    checks = {}
    if ident.geometry_texts == "validation":  # texts no builder trained on, AUROC never ranks
        for concept, d in data.concepts.items():
            x, y = d.validation
            checks[concept] = unit(x[y == 1].mean(axis=0) - x[y == 0].mean(axis=0))
    return DirectionSet([s for s in specs if s.id in present], by_concept, second, checks)
