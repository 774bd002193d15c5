"""Stage: the probe set (Phase 4), one linear probe per concept, scored on held-out prompts.

Classifiers live under ``<classifier.dir>/<model>_L<layer>_<train>_seed<seed>_<recipe>/``
as portable JSON (weight, bias, layer, model id, training set), with an ``index.json`` of
the evaluation metrics, the ``format_axis.json`` that the diagnostics and the
``classifier_deformat`` source need, and a ``diagnostics.json``. Phase 5 reuses them and
refuses ones trained for another model or layer.

Training texts are format-matched (``experiments/prompts.py``). Each probe is scored on
a balanced test split, with its decision threshold chosen on a separate validation split
(``steering.probes.evaluate_probe``). Its ``diffmean`` vector is mean(positives) −
mean(negative-concept texts) on the same training set, as the issue defines it; neutral
texts join the negative side only when a spec has no negatives (Px0xU). Why not all
label-0 texts: with them, diffmean at 1×1×1 is x_pos − ½(x_neg + x_neu), the vector the
probe weight already approximates (cosine 0.993 in the first release), so it would not
be a second direction source.

Several layers train from one forward pass (``kernel/classifiers.train_layers``, Phase 4's
study), so the steering layer can be picked from measured AUROC instead of assumed.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from experiments.concepts import ConceptGraph
from experiments.config import RunConfig
from experiments.kernel.diagnostics import (
    FORMAT_AXIS_FORMAT,
    classifier_set_diagnostics,
    format_axis,
    format_axis_floor,
)
from experiments.prompts import (
    FORMAT_AXIS_REWRITES,
    ProbeExample,
    format_axis_texts,
    probe_eval_set,
    probe_training_set,
)
from steering.activations import pooled_activations_by_layer
from steering.memory import activation_texts
from steering.models import LoadedModel, model_slug
from steering.probes import (
    LinearProbe,
    ProbeError,
    TrainSpec,
    diffmean_direction,
    evaluate_probe,
    train_probe,
    train_separation,
)

log = logging.getLogger(__name__)
# Bumped whenever training changes what a probe is, so stale classifiers are never reused.
PROBE_RECIPE = "format-matched-v3"
FORMAT_AXIS_FILE = "format_axis.json"
DIAGNOSTICS_FILE = "diagnostics.json"
MEAN_KEYS = (
    "auroc",
    "ap",
    "f1_raw",
    "precision_raw",
    "recall_raw",
    "accuracy_raw",
    "f1_calibrated",
    "precision_calibrated",
    "recall_calibrated",
    "accuracy_calibrated",
    "class_ratio",
)


@dataclass
class ProbeSet:
    """One layer's probes, with the format axis and direction diagnostics of that layer."""

    directory: Path
    probes: dict[str, LinearProbe]
    run_id: str | None = None
    seconds: float = 0.0
    format_axis: np.ndarray | None = None
    diagnostics: dict[str, Any] = field(default_factory=dict)

    def predictor(self, name: str = "f1_calibrated") -> dict[str, float]:
        """Per-concept values of a held-out predictor (concepts without one are left out)."""
        return {k: v for k, p in self.probes.items() if (v := p.predictor(name)) is not None}

    def means(self) -> dict[str, float]:
        """Each of :data:`MEAN_KEYS` averaged over the probes that measured it."""
        out = {}
        for key in MEAN_KEYS:
            found = [p.metrics[key] for p in self.probes.values() if p.metrics.get(key) is not None]
            if found:
                out[key] = float(np.mean(found))
        return out


@dataclass
class ProbeTexts:
    """Every text Phase 4 embeds: per-concept splits plus the format-axis pairs."""

    train: dict[str, list[ProbeExample]]
    validation: dict[str, list[ProbeExample]]
    test: dict[str, list[ProbeExample]]
    questions: list[str]
    statements: list[str]
    graph_id: str = ""  # graph_key() of the graph the texts were drawn from

    def all_texts(self) -> list[str]:
        sets = (*self.train.values(), *self.validation.values(), *self.test.values())
        texts = {e.text for s in sets for e in s} | set(self.questions) | set(self.statements)
        return sorted(texts)


def graph_key(graph: ConceptGraph) -> str:
    """What a concept's probe texts depend on beyond the concept itself: the graph's
    neutral pool and its builder settings. Two graphs that differ there (the top 10 and
    the top 50) give the same concept different training texts, so they must not share
    a classifier folder; a ``limit`` of the same graph keeps the key and reuses it."""
    import hashlib

    data = graph.to_dict()
    shared = {"metadata": data["metadata"], "neutral_pool": data["neutral_pool"]}
    return hashlib.sha256(json.dumps(shared, sort_keys=True).encode()).hexdigest()[:8]


def classifier_dir(config: RunConfig, model_id: str, layer: int, graph_id: str) -> Path:
    """The folder of one classifier set; ``graph_id`` is :func:`graph_key` of its graph."""
    name = (
        f"{model_slug(model_id)}_L{layer}_{config.classifier.train}_seed{config.seed}"
        f"_g{graph_id}_{PROBE_RECIPE}"
    )
    return Path(config.classifier.dir) / name


def probe_path(directory: Path, synset: str) -> Path:
    return directory / f"{synset}.json"


def load_format_axis(directory: Path, model_id: str, layer: int) -> np.ndarray | None:
    """The classifier set's format axis, or None when the folder has none."""
    path = directory / FORMAT_AXIS_FILE
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    if data.get("format") != FORMAT_AXIS_FORMAT:
        raise ProbeError(f"{path} is not a {FORMAT_AXIS_FORMAT} file; run `make classifiers`")
    if data.get("model_id") != model_id or data.get("layer") != layer:
        raise ProbeError(
            f"{path} was computed on {data.get('model_id')} at layer {data.get('layer')}, "
            f"not {model_id} at layer {layer}; run `make classifiers`"
        )
    return np.asarray(data["vector"], dtype=np.float64)


def load_classifiers(config: RunConfig, graph: ConceptGraph, model_id: str, layer: int) -> ProbeSet:
    """Load every concept's classifier, or say which are missing and how to make them."""
    directory = classifier_dir(config, model_id, layer, graph_key(graph))
    missing = [c.synset for c in graph.concepts if not probe_path(directory, c.synset).exists()]
    if missing:
        raise ProbeError(
            f"no classifier for {', '.join(missing)} under {directory}; run `make classifiers` "
            "(or `steer-eval classifiers` with the same config)"
        )
    probes = {}
    for concept in graph.concepts:
        probe = LinearProbe.load(probe_path(directory, concept.synset))
        probe.check_compatible(model_id, layer)
        probes[concept.synset] = probe
    axis = load_format_axis(directory, model_id, layer)
    diag_path = directory / DIAGNOSTICS_FILE
    diagnostics = json.loads(diag_path.read_text()) if diag_path.exists() else {}
    return ProbeSet(directory, probes, format_axis=axis, diagnostics=diagnostics)


def build_probe_texts(config: RunConfig, graph: ConceptGraph) -> ProbeTexts:
    """Training, validation and test sets per concept, plus the format-axis texts."""
    spec = TrainSpec.parse(config.classifier.train)
    n, seed = config.classifier.eval_per_class, config.seed
    questions, statements = format_axis_texts(graph)
    return ProbeTexts(
        train={
            c.synset: probe_training_set(c, graph, spec.n_pos, spec.n_neg, spec.n_neutral, seed)
            for c in graph.concepts
        },
        validation={
            c.synset: probe_eval_set(c, graph, n, seed, split="validation") for c in graph.concepts
        },
        test={c.synset: probe_eval_set(c, graph, n, seed, split="test") for c in graph.concepts},
        questions=questions,
        statements=statements,
        graph_id=graph_key(graph),
    )


def _diffmean(x_train: np.ndarray, train: Sequence[ProbeExample]) -> np.ndarray:
    """Positives minus negative-concept texts (all label-0 texts when there are none)."""
    kinds = [e.kind for e in train]
    keep = [k != "neutral" for k in kinds] if "negative" in kinds else [True] * len(kinds)
    labels = np.array([e.label for e in train])
    return diffmean_direction(x_train[keep], labels[keep])


def fit_probe_set(
    config: RunConfig,
    texts: ProbeTexts,
    features: np.ndarray,
    row: dict[str, int],
    layer: int,
    model_id: str,
) -> ProbeSet:
    """Train and evaluate one layer's probes from precomputed features (no model needed)."""
    spec = TrainSpec.parse(config.classifier.train)

    def rows(examples: Sequence[ProbeExample]) -> tuple[np.ndarray, np.ndarray]:
        return features[[row[e.text] for e in examples]], np.array([e.label for e in examples])

    probes: dict[str, LinearProbe] = {}
    for synset, train in texts.train.items():
        x_train, y_train = rows(train)
        weight, bias = train_probe(x_train, y_train, seed=config.seed, c=config.classifier.c)
        probe = LinearProbe(
            concept=synset,
            weight=weight,
            bias=bias,
            layer=layer,
            model_id=model_id,
            train_spec=str(spec),
            seed=config.seed,
            train_texts=[e.text for e in train],
            train_labels=y_train.tolist(),
            diffmean=_diffmean(x_train, train),
        )
        x_test, y_test = rows(texts.test[synset])
        probe.metrics = evaluate_probe(
            probe, x_test, y_test, validation=rows(texts.validation[synset])
        )
        probe.metrics["train_separation"] = train_separation(weight, x_train, y_train)
        # The test split's decisions, so a predictor's split-half reliability can be
        # measured later without the model (phase5/measurement.py).
        probe.metrics["test_scores"] = [float(v) for v in probe.decision(x_test)]
        probe.metrics["test_labels"] = [int(v) for v in y_test]
        probes[synset] = probe
    questions = features[[row[t] for t in texts.questions]]
    statements = features[[row[t] for t in texts.statements]]
    axis, _norm = format_axis(questions, statements)
    n_groups = len(FORMAT_AXIS_REWRITES)  # the axis texts are template-major
    groups = [*np.array_split(questions, n_groups), *np.array_split(statements, n_groups)]
    floor = format_axis_floor(groups, axis, seed=config.seed)
    directory = classifier_dir(config, model_id, layer, texts.graph_id)
    return ProbeSet(
        directory,
        probes,
        format_axis=axis,
        diagnostics=classifier_set_diagnostics(probes, axis, floor),
    )


def save_probe_set(
    probe_set: ProbeSet,
    config: RunConfig,
    texts: ProbeTexts,
    layer: int,
    model_id: str,
    concept_file: str | None,
) -> None:
    """Write the probe files, the format axis, the diagnostics and the index."""
    directory = probe_set.directory
    for synset, probe in probe_set.probes.items():
        probe.save(probe_path(directory, synset))
    if probe_set.format_axis is not None:
        axis = {
            "format": FORMAT_AXIS_FORMAT,
            "model_id": model_id,
            "layer": layer,
            "vector": [float(x) for x in probe_set.format_axis],
            "definition": "unit mean(question) - mean(statement) activations: the TRAIN "
            "question templates and their declarative rewrites (FORMAT_AXIS_REWRITES) on the "
            "training half of the neutral pool",
            "floor": probe_set.diagnostics.get("format_axis_floor"),
            "n_questions": len(texts.questions),
            "n_statements": len(texts.statements),
        }
        (directory / FORMAT_AXIS_FILE).write_text(json.dumps(axis))
    (directory / DIAGNOSTICS_FILE).write_text(json.dumps(probe_set.diagnostics, indent=1))
    index = {
        "model_id": model_id,
        "layer": layer,
        "train": config.classifier.train,
        "seed": config.seed,
        "recipe": PROBE_RECIPE,
        "concept_file": concept_file,
        "seconds": probe_set.seconds,
        "predictor_default": config.criteria.predictor,
        "diffmean": "mean(positives) - mean(negative-concept texts), format-matched",
        "concepts": {k: p.metrics for k, p in probe_set.probes.items()},
        "mean": probe_set.means(),
        "diagnostics": {
            s: {k: v for k, v in d.items() if k != "cosine_matrix"}
            for s, d in probe_set.diagnostics.get("sources", {}).items()
        },
    }
    (directory / "index.json").write_text(json.dumps(index, indent=2))


def parse_layers(text: str) -> list[int]:
    """``"3,6,9"`` -> [3, 6, 9]; a clear ValueError for anything else."""
    try:
        layers = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        layers = []
    if not layers:
        raise ValueError(f"--layers {text!r} must be comma-separated integers, e.g. 3,6,9,12,15")
    return layers


def fit_layers(
    config: RunConfig,
    lm: LoadedModel,
    texts: ProbeTexts,
    layers: Sequence[int],
) -> dict[int, ProbeSet]:
    """Every layer's probe set from one model pass, each timed as the whole pass."""
    started = time.perf_counter()
    all_texts = texts.all_texts()
    row = {t: i for i, t in enumerate(all_texts)}
    by_layer = pooled_activations_by_layer(
        lm, all_texts, list(layers), batch_size=activation_texts(lm, 64)
    )  # 64 on the CPU
    sets = {
        layer: fit_probe_set(config, texts, by_layer[layer].numpy(), row, layer, lm.probe_id)
        for layer in layers
    }
    seconds = time.perf_counter() - started
    for probe_set in sets.values():
        probe_set.seconds = seconds
    return sets


def best_layer(sets: dict[int, ProbeSet]) -> int:
    """The layer with the highest mean test AUROC (the lowest layer on ties)."""
    return max(sorted(sets), key=lambda layer: sets[layer].means().get("auroc", -1.0))
