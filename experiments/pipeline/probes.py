"""Stage: the probe set (Phase 4), one linear probe per concept, scored on held-out prompts.

Classifiers live under ``<classifier.dir>/<model>_L<layer>_<train>_seed<seed>/`` as
portable JSON (weight, bias, layer, model id, training set), with an ``index.json``
of the evaluation metrics. Phase 5 reuses them and refuses ones trained for another
model or layer.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from experiments import tracking
from experiments.concepts import ConceptGraph
from experiments.config import ExperimentConfig, dump_config
from experiments.prompts import probe_eval_set, probe_training_set
from steering.activations import pooled_activations
from steering.models import LoadedModel, model_slug
from steering.probes import (
    LinearProbe,
    ProbeError,
    TrainSpec,
    diffmean_direction,
    evaluate_probe,
    train_probe,
)

log = logging.getLogger(__name__)
# Bumped whenever training changes what a probe is, so stale classifiers are never reused.
PROBE_RECIPE = "centred-v2"


@dataclass
class ProbeSet:
    directory: Path
    probes: dict[str, LinearProbe]
    run_id: str | None = None
    seconds: float = 0.0

    def f1(self) -> dict[str, float]:
        return {k: float(p.metrics["f1"]) for k, p in self.probes.items()}


def classifier_dir(config: ExperimentConfig, model_id: str, layer: int) -> Path:
    name = (
        f"{model_slug(model_id)}_L{layer}_{config.classifier.train}_seed{config.seed}"
        f"_{PROBE_RECIPE}"
    )
    return Path(config.classifier.dir) / name


def probe_path(directory: Path, synset: str) -> Path:
    return directory / f"{synset}.json"


def load_classifiers(
    config: ExperimentConfig, graph: ConceptGraph, model_id: str, layer: int
) -> ProbeSet:
    """Load every concept's classifier, or say which are missing and how to make them."""
    directory = classifier_dir(config, model_id, layer)
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
    return ProbeSet(directory, probes)


def _confusion_figure(probes: dict[str, LinearProbe]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(probes)
    cols = min(5, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(2.6 * cols, 2.6 * rows), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, (synset, probe) in zip(axes.flat, probes.items(), strict=False):
        cm = probe.metrics["confusion"]
        grid = np.array([[cm["tn"], cm["fp"]], [cm["fn"], cm["tp"]]])
        ax.axis("on")
        ax.imshow(grid, cmap="Blues", vmin=0)
        for (i, j), value in np.ndenumerate(grid):
            ax.text(j, i, str(value), ha="center", va="center")
        ax.set_xticks([0, 1], ["pred 0", "pred 1"])
        ax.set_yticks([0, 1], ["true 0", "true 1"])
        ax.set_title(f"{synset}\nF1={probe.metrics['f1']:.2f}", fontsize=8)
    fig.suptitle("Phase 4 held-out confusion matrices")
    fig.tight_layout()
    return fig


def train_classifiers(
    config: ExperimentConfig,
    lm: LoadedModel,
    graph: ConceptGraph,
    layer: int,
    concept_file: str | None = None,
) -> ProbeSet:
    """Train, evaluate, save and log one probe per concept (one MLflow run per call)."""
    started = time.perf_counter()
    spec = TrainSpec.parse(config.classifier.train)
    directory = classifier_dir(config, lm.model_id, layer)
    train_sets, eval_sets = {}, {}
    for concept in graph.concepts:
        train_sets[concept.synset] = probe_training_set(
            concept, graph, spec.n_pos, spec.n_neg, spec.n_neutral, seed=config.seed
        )
        eval_sets[concept.synset] = probe_eval_set(
            concept, graph, n_per_class=config.classifier.eval_per_class, seed=config.seed
        )
    texts = sorted({ex.text for s in (*train_sets.values(), *eval_sets.values()) for ex in s})
    features = pooled_activations(lm, texts, layer, batch_size=64).numpy()
    row = {t: i for i, t in enumerate(texts)}

    probes: dict[str, LinearProbe] = {}
    for concept in graph.concepts:
        train, held = train_sets[concept.synset], eval_sets[concept.synset]
        x_train = features[[row[e.text] for e in train]]
        y_train = np.array([e.label for e in train])
        weight, bias = train_probe(x_train, y_train, seed=config.seed, c=config.classifier.c)
        probe = LinearProbe(
            concept=concept.synset,
            weight=weight,
            bias=bias,
            layer=layer,
            model_id=lm.model_id,
            train_spec=str(spec),
            seed=config.seed,
            train_texts=[e.text for e in train],
            train_labels=y_train.tolist(),
            diffmean=diffmean_direction(x_train, y_train),
        )
        x_eval = features[[row[e.text] for e in held]]
        probe.metrics = evaluate_probe(probe, x_eval, np.array([e.label for e in held]))
        probe.save(probe_path(directory, concept.synset))
        probes[concept.synset] = probe
    seconds = time.perf_counter() - started
    index = {
        "model_id": lm.model_id,
        "layer": layer,
        "train": str(spec),
        "seed": config.seed,
        "concept_file": concept_file,
        "seconds": seconds,
        "concepts": {k: p.metrics for k, p in probes.items()},
        "mean": _means(probes),
    }
    (directory / "index.json").write_text(json.dumps(index, indent=2))
    result = ProbeSet(directory, probes, seconds=seconds)
    result.run_id = _log_run(config, lm, graph, layer, result, eval_sets)
    tracking.remember_run(directory, result.run_id)  # a later run that loads these links it
    return result


def _means(probes: dict[str, LinearProbe]) -> dict[str, float]:
    keys = ("f1", "precision", "recall", "auroc", "accuracy")
    out = {}
    for key in keys:
        values = [p.metrics[key] for p in probes.values() if p.metrics.get(key) is not None]
        if values:
            out[key] = float(np.mean(values))
    return out


def _log_run(config, lm, graph, layer, result: ProbeSet, eval_sets) -> str:
    import pandas as pd

    with tracking.tracked_run(
        config.tracking.classifier_experiment,
        f"classifiers-{config.classifier.train}-L{layer}",
        tags={"phase": "4"},
    ) as run_id:
        c = tracking.client()
        tracking.log_params(
            run_id,
            {
                "model": lm.model_id,
                "layer": layer,
                "train": config.classifier.train,
                "seed": config.seed,
                "n_concepts": len(graph.concepts),
                "eval_per_class": config.classifier.eval_per_class,
                "c": config.classifier.c,
                "config_hash": config.config_hash(),
            },
        )
        metrics: dict[str, float | None] = {
            f"mean_{k}": v for k, v in _means(result.probes).items()
        }
        for synset, probe in result.probes.items():
            for key in ("f1", "precision", "recall", "auroc"):
                metrics[f"{key}/{synset}"] = probe.metrics.get(key)
        metrics["train_seconds"] = result.seconds
        tracking.log_metrics(run_id, metrics)
        table = pd.DataFrame(
            [
                {
                    "concept": k,
                    **{m: p.metrics.get(m) for m in ("f1", "precision", "recall", "auroc")},
                    **p.metrics["confusion"],
                }
                for k, p in result.probes.items()
            ]
        )
        c.log_table(run_id, table, "classifier_metrics.json")
        c.log_artifacts(run_id, str(result.directory), "classifiers")
        with tempfile.TemporaryDirectory() as tmp:
            graph_path = Path(tmp) / "concept_graph.json"
            graph.save(graph_path)
            c.log_artifact(run_id, str(graph_path))
            held = {k: [e.__dict__ for e in v] for k, v in eval_sets.items()}
            c.log_dict(run_id, held, "eval_prompts.json")
            c.log_text(run_id, dump_config(config), "config.yaml")
        import matplotlib.pyplot as plt

        fig = _confusion_figure(result.probes)
        c.log_figure(run_id, fig, "confusion_matrices.png")
        plt.close(fig)
    return run_id


def ensure_classifiers(
    config: ExperimentConfig, lm: LoadedModel, graph: ConceptGraph, layer: int
) -> ProbeSet:
    """Reuse the classifiers this config needs, training them only when missing."""
    try:
        return load_classifiers(config, graph, lm.model_id, layer)
    except ProbeError as exc:
        if "no classifier" not in str(exc) or not config.classifier.auto_train:
            raise
        log.info("training the missing classifiers: %s", exc)
        return train_classifiers(config, lm, graph, layer)
