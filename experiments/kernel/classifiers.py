"""Phase 4 as a study: the classifiers one call trains, from one model pass, as a run.

``steer-eval classifiers``, and every study that finds its classifiers missing
(:func:`ensure_classifiers`), trains them through :class:`Phase4`, run by the one runner
(``kernel/study.run_study``) in the ``tracking.classifier_experiment`` experiment: the
layers are checked before the run opens, the probes are trained and saved in their
classifier folders (``kernel/probes.py``: where later runs load them from), and the run
holds what they measured: per-concept metrics (per layer when several), the direction
diagnostics, the held-out texts, the figures and the classifier folders. Its own folder,
``<classifier.dir>/runs/<run id>/``, holds its record (``classifiers.json``), config and
views like every run's.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from experiments.answer import Answer
from experiments.concepts import ConceptGraph
from experiments.config import Phase, RunConfig
from experiments.kernel.diagnostics import cosine_heatmap, layer_heatmap
from experiments.kernel.layer_table import num
from experiments.kernel.lifecycle import RunSession
from experiments.kernel.probe_log import confusion_figure, metrics_rows, set_metrics
from experiments.kernel.probes import (
    PROBE_RECIPE,
    ProbeSet,
    best_layer,
    build_probe_texts,
    fit_layers,
    load_classifiers,
    save_probe_set,
)
from experiments.kernel.publisher import ChildRun, Views
from experiments.kernel.study import Begun, Finished, Opening, run_study
from experiments.record import ClassifierRecord, LayerProbes
from experiments.rundir import RunDir
from steering.models import LoadedModel
from steering.probes import ProbeError

log = logging.getLogger(__name__)
PHASE = "4"
QUESTION = "How well does each concept's probe detect it on held-out texts?"


def runs_root(config: RunConfig) -> Path:
    """Where Phase 4's run folders are: beside the classifier sets they trained."""
    return Path(config.classifier.dir) / "runs"


class Phase4:
    """Train, evaluate and save one probe per concept at each layer (a
    :class:`~experiments.kernel.study.Study`); its products are the probe sets."""

    phase: Phase | None = None  # a Phase 4 run is never reopened: training again makes a new one
    record_file: str = RunDir.CLASSIFIERS

    def __init__(
        self, graph: ConceptGraph, layers: Sequence[int], concept_file: str | None
    ) -> None:
        self.graph = graph
        self.asked = list(layers)
        self.concept_file = concept_file

    def begin(self, session: RunSession[RunConfig]) -> Begun[list[int]]:
        """The layers, checked against the model before anything is logged."""
        config = session.config
        layers = sorted({session.model.check_layer(layer) for layer in self.asked})
        name = "L" + "-".join(str(layer) for layer in layers)
        opening = Opening(
            f"classifiers-{config.classifier.train}-{name}",
            {"phase": PHASE, "probe_recipe": PROBE_RECIPE},
            experiment=config.tracking.classifier_experiment,
            results_root=runs_root(config),
        )
        return Begun(opening, layers)

    def started(
        self, session: RunSession[RunConfig], new: bool, layers: list[int]
    ) -> dict[str, object]:
        config = session.config
        return {
            "model": session.model.probe_id,
            "layer": layers[0] if len(layers) == 1 else ",".join(map(str, layers)),
            "train": config.classifier.train,
            "seed": config.seed,
            "n_concepts": len(self.graph.concepts),
            "eval_per_class": config.classifier.eval_per_class,
            "c": config.classifier.c,
            "predictor": config.criteria.predictor,
            "probe_recipe": PROBE_RECIPE,
            "config_hash": config.config_hash(),
        }

    def stages(
        self, session: RunSession[RunConfig], layers: list[int]
    ) -> Finished[ClassifierRecord, dict[int, ProbeSet]]:
        config, lm, timer = session.config, session.model, session.timer
        with timer.time("texts"):
            texts = build_probe_texts(config, self.graph)
        with timer.time("training"):
            sets = fit_layers(config, lm, texts, layers)
        for layer, probe_set in sets.items():
            save_probe_set(probe_set, config, texts, layer, lm.probe_id, self.concept_file)
        run_dir = session.directory
        self.graph.save(run_dir.file(CONCEPT_GRAPH))
        held = {
            split: {k: [e.__dict__ for e in v] for k, v in getattr(texts, split).items()}
            for split in ("validation", "test")
        }
        run_dir.write_json(EVAL_PROMPTS, held)
        axis = {"questions": texts.questions, "statements": texts.statements}
        run_dir.write_json(FORMAT_AXIS_TEXTS, axis)
        record = ClassifierRecord(
            run_id=session.parent_id,
            experiment=config.tracking.classifier_experiment,
            model_id=lm.probe_id,
            recipe=PROBE_RECIPE,
            train=config.classifier.train,
            seed=config.seed,
            config_hash=config.config_hash(),
            concepts=[c.synset for c in self.graph.concepts],
            layers={
                str(layer): LayerProbes(directory=str(ps.directory), mean=ps.means())
                for layer, ps in sets.items()
            },
            best_layer=best_layer(sets) if len(sets) > 1 else None,
            seconds=next(iter(sets.values())).seconds,
        )
        return Finished(record, sets)

    def views(self, record: ClassifierRecord, sets: dict[int, ProbeSet]) -> Views:
        """Per-concept metrics (per layer when several), tables, figures, the classifier
        folders and the held-out texts."""
        single = len(sets) == 1
        metrics: dict[str, float | None] = {}
        tables: dict[str, pd.DataFrame] = {}
        figures = {}
        folders = {}
        for layer, ps in sets.items():
            tag = "" if single else f"/L{layer}"
            metrics.update(set_metrics(ps.probes, ps.means(), ps.diagnostics, tag))
            tables[f"metrics{tag}.json"] = pd.DataFrame(metrics_rows(ps.probes))
            folders[f"classifiers{tag}"] = ps.directory
            name = tag.replace("/", "_")
            figures[f"direction_cosines{name}.png"] = cosine_heatmap(
                ps.diagnostics.get("sources", {}), f"concept directions, layer {layer}"
            )
            figures[f"confusion_matrices{name}.png"] = confusion_figure(ps.probes)
        if not single:
            figures["auroc_by_layer.png"] = layer_heatmap(
                {
                    layer: {k: p.metrics.get("auroc") for k, p in ps.probes.items()}
                    for layer, ps in sets.items()
                }
            )
            metrics["best_layer_by_auroc"] = float(best_layer(sets))
        metrics["train_seconds"] = record.seconds
        answer = answer_of(record)
        summary = "\n".join([f"# Phase 4 classifiers ({record.model_id})", "", *answer.notes, ""])
        return Views(
            answer=answer,
            summary=summary,
            figures=figures,
            metrics=metrics,
            tables=tables,
            artefacts=(RunDir.CONFIG, CONCEPT_GRAPH, EVAL_PROMPTS, FORMAT_AXIS_TEXTS),
            folders=folders,
            experiment=record.experiment,
        )

    def children(self, record: ClassifierRecord, sets: dict[int, ProbeSet]) -> list[ChildRun]:
        return []


# Phase 4's run-folder files beside its record.
CONCEPT_GRAPH = "concept_graph.json"
EVAL_PROMPTS = "eval_prompts.json"
FORMAT_AXIS_TEXTS = "format_axis_texts.json"


def answer_of(record: ClassifierRecord) -> Answer:
    """Phase 4 answers with what its probes measured (no criterion is judged here)."""
    notes = [
        f"layer {layer}: mean test AUROC {num(probes.mean.get('auroc'))}, calibrated F1 "
        f"{num(probes.mean.get('f1_calibrated'))} over {len(record.concepts)} concepts"
        for layer, probes in record.layers.items()
    ]
    if record.best_layer is not None:
        notes.append(f"best layer by mean AUROC: {record.best_layer}")
    return Answer(PHASE, record.run_id, QUESTION, 0.95, notes=notes)


def train_layers(
    config: RunConfig,
    lm: LoadedModel,
    graph: ConceptGraph,
    layers: Sequence[int],
    concept_file: str | None = None,
) -> dict[int, ProbeSet]:
    """Train, evaluate, save and log probes at every layer from one model pass: one
    Phase 4 run covers them all (layers checked against the model first, with a clear
    error naming the valid range)."""
    from experiments import tracking

    ran = run_study(
        Phase4(graph, layers, concept_file), config, lm=lm, graph=graph, need_embedder=False
    )
    sets = ran.products
    for probe_set in sets.values():
        probe_set.run_id = ran.run_id
        tracking.remember_run(probe_set.directory, ran.run_id)  # a later run links it
    return sets


def train_classifiers(
    config: RunConfig,
    lm: LoadedModel,
    graph: ConceptGraph,
    layer: int,
    concept_file: str | None = None,
) -> ProbeSet:
    """Train, evaluate, save and log one probe per concept (one MLflow run per call)."""
    return train_layers(config, lm, graph, [layer], concept_file)[lm.check_layer(layer)]


def ensure_classifiers(
    config: RunConfig, lm: LoadedModel, graph: ConceptGraph, layer: int
) -> ProbeSet:
    """Reuse the classifiers this config needs, training them only when missing."""
    try:
        return load_classifiers(config, graph, lm.probe_id, layer)
    except ProbeError as exc:
        if "no classifier" not in str(exc) or not config.classifier.auto_train:
            raise
        log.info("training the missing classifiers: %s", exc)
        return train_classifiers(config, lm, graph, layer)


__all__ = ["Phase4", "ensure_classifiers", "train_classifiers", "train_layers"]
