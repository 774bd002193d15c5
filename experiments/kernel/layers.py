"""Stage: ``--layer auto``, the steering layer picked from a probe sweep over layers.

The middle layer is a guess that suited Gemma 3; the suite already compares layers from
one model pass (``train_layers``, ``steer-eval classifiers --layers``) and names the best
by mean test AUROC (``best_layer``). Auto runs that sweep over the middle half of the
model, reusing the layers whose classifiers are already saved and training the rest in
one pass, and picks the best.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from experiments.concepts import ConceptGraph
from experiments.config import ExperimentConfig
from experiments.kernel.classifiers import train_layers
from experiments.kernel.probes import ProbeSet, best_layer, load_classifiers
from steering.models import LoadedModel
from steering.probes import ProbeError

# Where the sweep looks: the quarter, three eighths, half, five eighths, three quarters.
SWEEP_FRACTIONS = (0.25, 0.375, 0.5, 0.625, 0.75)


def sweep_layers(n_layers: int) -> list[int]:
    """The layers ``--layer auto`` compares: 4, 7, 9, 11, 14 of the 270M's 18."""
    return sorted({min(n_layers - 1, max(0, round(n_layers * f))) for f in SWEEP_FRACTIONS})


def pick_layer(
    config: ExperimentConfig,
    lm: LoadedModel,
    graph: ConceptGraph,
    layers: Sequence[int] | None = None,
    say: Callable[[str], None] = lambda _msg: None,
) -> tuple[int, dict[int, ProbeSet]]:
    """(the layer with the best mean test AUROC, every layer's probe set): saved
    classifiers are reused, missing layers trained together."""
    wanted = sorted({lm.check_layer(la) for la in (layers or sweep_layers(lm.n_layers))})
    sets: dict[int, ProbeSet] = {}
    for layer in wanted:
        try:
            sets[layer] = load_classifiers(config, graph, lm.probe_id, layer)
        except ProbeError as exc:
            if "no classifier" not in str(exc):
                raise
    missing = [la for la in wanted if la not in sets]
    if missing:
        say(f"layer auto: training probes at layers {missing} (one model pass)")
        sets.update(train_layers(config, lm, graph, missing, concept_file=config.concepts.file))
    best = best_layer(sets)
    aurocs = ", ".join(f"L{la} {sets[la].means().get('auroc', float('nan')):.3f}" for la in wanted)
    say(f"layer auto: {best} (mean test AUROC by layer: {aurocs})")
    return best, sets
