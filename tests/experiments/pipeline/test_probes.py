"""Phase 4 on the embedded 270M model: probes, held-out F1, portable files, MLflow."""

from __future__ import annotations

import json

import numpy as np
import pytest

from experiments import tracking
from experiments.concepts import load_concepts
from experiments.config import load_config
from experiments.pipeline.probes import (
    classifier_dir,
    ensure_classifiers,
    load_classifiers,
    train_classifiers,
)
from steering.probes import LinearProbe, ProbeError

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def setup(tmp_path_factory, mlflow_store, embedded_lm):
    tmp = tmp_path_factory.mktemp("phase4")
    config = load_config("configs/phase5.yaml", [f"classifier.dir={tmp}", "concepts.limit=3"])
    graph = load_concepts(config.concepts.file, limit=3)
    result = train_classifiers(config, embedded_lm, graph, 9)
    return config, graph, result


def test_probes_beat_chance_on_their_held_out_sets(setup):
    _, _, result = setup
    aurocs = [p.metrics["auroc"] for p in result.probes.values()]
    assert np.mean(aurocs) > 0.6, aurocs
    for probe in result.probes.values():
        m = probe.metrics
        assert m["n_eval"] == 60
        assert sum(m["confusion"].values()) == 60


def test_same_seed_gives_identical_f1_and_weights(setup, embedded_lm, tmp_path):
    config, graph, first = setup
    again = train_classifiers(
        config.model_copy(
            update={"classifier": config.classifier.model_copy(update={"dir": str(tmp_path)})}
        ),
        embedded_lm,
        graph,
        9,
    )
    for synset, probe in first.probes.items():
        other = again.probes[synset]
        assert probe.metrics["f1"] == other.metrics["f1"]
        np.testing.assert_array_equal(probe.weight, other.weight)


def test_classifier_files_are_portable_and_checked(setup, embedded_lm):
    config, graph, result = setup
    directory = classifier_dir(config, embedded_lm.model_id, 9)
    assert directory == result.directory
    index = json.loads((directory / "index.json").read_text())
    assert set(index["concepts"]) == set(graph.synsets)
    probe = LinearProbe.load(directory / f"{graph.synsets[0]}.json")
    assert probe.layer == 9 and probe.model_id == embedded_lm.model_id
    assert probe.train_spec == "1x1x1" and len(probe.train_texts) == 3
    # The raw-space direction points toward the concept's positive training example.
    assert probe.decision(np.zeros(640)) < probe.decision(probe.direction() * 1e4)
    loaded = load_classifiers(config, graph, embedded_lm.model_id, 9)
    assert set(loaded.probes) == set(graph.synsets)
    with pytest.raises(ProbeError, match="make classifiers"):
        load_classifiers(config, graph, embedded_lm.model_id, 6)
    with pytest.raises(ProbeError, match="trained on"):
        probe.check_compatible("another-model", 9)
    # ensure_classifiers reuses what exists instead of retraining.
    assert ensure_classifiers(config, embedded_lm, graph, 9).run_id is None


def test_one_mlflow_run_with_metrics_and_artefacts(setup):
    config, graph, result = setup
    run = tracking.get_run(result.run_id)
    assert run.info.experiment_id == tracking.experiment_id(config.tracking.classifier_experiment)
    assert "mean_f1" in run.data.metrics
    for synset in graph.synsets:
        assert f"f1/{synset}" in run.data.metrics
    paths = {a.path for a in tracking.client().list_artifacts(result.run_id)}
    assert {"classifiers", "concept_graph.json", "confusion_matrices.png"} <= paths


def test_missing_classifier_without_auto_train_names_make_classifiers(embedded_lm, tmp_path):
    config = load_config(
        "configs/phase5.yaml", [f"classifier.dir={tmp_path}", "classifier.auto_train=false"]
    )
    graph = load_concepts(config.concepts.file, limit=1)
    with pytest.raises(ProbeError, match="make classifiers"):
        ensure_classifiers(config, embedded_lm, graph, 9)
