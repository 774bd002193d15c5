"""Stage: the detection metrics of imported directions (``vector_source: file``).

"Does detection predict steering?" needs each direction's own detection quality, not
the probe's it replaced. An imported vector is scored as a detector exactly as Phase 4
scores a probe (``steering.probes.evaluate_probe``): its projection is the decision, on
the same held-out test texts, with the calibrated threshold chosen on the same
validation split. The probe set returned carries these metrics in place of the probes'
own, so the run's predictors, criteria, reliabilities and record read them unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from experiments.concepts import ConceptGraph
from experiments.config import RunConfig
from experiments.kernel.probes import ProbeSet, build_probe_texts
from experiments.kernel.vectors import VectorSet
from steering.activations import pooled_activations
from steering.memory import activation_texts
from steering.models import LoadedModel
from steering.probes import LinearProbe, evaluate_probe

if TYPE_CHECKING:
    from experiments.prompts import ProbeExample


def direction_metrics(
    direction: np.ndarray,
    probe: LinearProbe,
    test: tuple[np.ndarray, np.ndarray],
    validation: tuple[np.ndarray, np.ndarray],
) -> dict[str, Any]:
    """Phase 4's held-out metrics of the projection onto ``direction`` (bias 0)."""
    detector = replace(probe, weight=np.asarray(direction, dtype=np.float64), bias=0.0, metrics={})
    metrics = evaluate_probe(detector, test[0], test[1], validation=validation)
    metrics["test_scores"] = [float(v) for v in detector.decision(test[0])]
    metrics["test_labels"] = [int(v) for v in test[1]]
    metrics["detector"] = "projection onto the imported direction"
    return metrics


def imported_detection(
    config: RunConfig,
    lm: LoadedModel,
    graph: ConceptGraph,
    probes: ProbeSet,
    vectors: VectorSet,
    layer: int,
) -> ProbeSet:
    """``probes`` with each probe's metrics replaced by its concept's imported direction's,
    measured on the probe's own test and validation texts at ``layer``."""
    texts = build_probe_texts(config, graph)
    wanted = sorted(
        {e.text for split in (texts.test, texts.validation) for s in split.values() for e in s}
    )
    row = {t: i for i, t in enumerate(wanted)}
    features = pooled_activations(lm, wanted, layer, batch_size=activation_texts(lm, 64)).numpy()

    def split(examples: Sequence[ProbeExample]) -> tuple[np.ndarray, np.ndarray]:
        return features[[row[e.text] for e in examples]], np.array([e.label for e in examples])

    directions = vectors.numpy_directions()
    scored = {
        synset: replace(
            probe,
            metrics=direction_metrics(
                directions[synset],
                probe,
                split(texts.test[synset]),
                split(texts.validation[synset]),
            ),
        )
        for synset, probe in probes.probes.items()
        if synset in directions
    }
    return replace(probes, probes=scored)
