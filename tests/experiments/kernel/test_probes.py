"""Phase 4: format-matched probes, held-out metrics, direction diagnostics, layer sweeps.

Unit tests run on the tiny random Gemma; those marked ``integration`` on the embedded
270M model (probes, held-out metrics, portable files, MLflow).
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from experiments import tracking
from experiments.concepts import load_concepts
from experiments.config import load_config
from experiments.kernel.classifiers import ensure_classifiers, train_classifiers, train_layers
from experiments.kernel.probes import (
    DIAGNOSTICS_FILE,
    FORMAT_AXIS_FILE,
    build_probe_texts,
    classifier_dir,
    fit_probe_set,
    graph_key,
    load_classifiers,
    parse_layers,
)
from experiments.kernel.vectors import build_vectors
from experiments.prompts import probe_training_set
from steering.activations import pooled_activations_by_layer
from steering.models import LayerIndexError, wrap_model
from steering.nulls import unit
from steering.probes import LinearProbe, ProbeError, train_probe
from steering.vector_files import VectorFileError

integration = pytest.mark.integration
METRIC_KEYS = {
    "auroc",
    "ap",
    "f1_raw",
    "precision_raw",
    "recall_raw",
    "f1_calibrated",
    "precision_calibrated",
    "recall_calibrated",
    "threshold",
    "n_test_pos",
    "n_test_neg",
    "class_ratio",
    "confusion_raw",
    "confusion_calibrated",
}


# ---------------------------------------------------------------------------- tiny model


def tiny_config(tmp_path, *extra: str):
    return load_config(
        "configs/phase5.yaml",
        ["concepts.limit=3", "classifier.eval_per_class=6", f"classifier.dir={tmp_path}", *extra],
    )


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, mlflow_store, tiny_lm):
    """Probes at layers 1, 2 and 3 of the tiny model from one pass (one MLflow run)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("sweep")
    config = tiny_config(tmp)
    graph = load_concepts(config.concepts.file, limit=3)
    sets = train_layers(config, tiny_lm, graph, [3, 1, -2])
    torch.set_num_threads(before)
    return config, graph, sets


def test_layer_sweep_saves_one_classifier_set_per_layer(sweep, tiny_lm):
    config, graph, sets = sweep
    assert sorted(sets) == [1, 2, 3]  # -2 is layer 2 of 4
    for layer, probe_set in sets.items():
        expected = classifier_dir(config, tiny_lm.model_id, layer, graph_key(graph))
        assert probe_set.directory == expected
        for name in ("index.json", FORMAT_AXIS_FILE, DIAGNOSTICS_FILE):
            assert (probe_set.directory / name).exists()
        for probe in probe_set.probes.values():
            assert probe.layer == layer
            assert set(probe.metrics) >= METRIC_KEYS
            assert probe.metrics["n_test_pos"] == probe.metrics["n_test_neg"] == 6
            assert probe.metrics["class_ratio"] == 1.0
            assert "f1" not in probe.metrics  # every F1 says at which threshold
        loaded = load_classifiers(config, graph, tiny_lm.model_id, layer)
        np.testing.assert_array_equal(loaded.format_axis, probe_set.format_axis)
        assert loaded.diagnostics == json.loads(json.dumps(probe_set.diagnostics))
        assert set(loaded.predictor("auroc")) == set(graph.synsets)


def test_one_pass_gives_the_same_probes_as_one_layer(sweep, tiny_lm, tmp_path, one_thread):
    _config, graph, sets = sweep
    alone = train_classifiers(tiny_config(tmp_path), tiny_lm, graph, 2)
    for synset, probe in alone.probes.items():
        np.testing.assert_array_equal(probe.weight, sets[2].probes[synset].weight)
        assert probe.metrics == sets[2].probes[synset].metrics


def test_layer_sweep_logs_auroc_per_layer_and_concept(sweep):
    _config, graph, sets = sweep
    run = tracking.get_run(sets[1].run_id)
    assert {ps.run_id for ps in sets.values()} == {sets[1].run_id}
    metrics = run.data.metrics
    for layer in (1, 2, 3):
        assert f"mean_auroc/L{layer}" in metrics
        for synset in graph.synsets:
            assert (
                metrics[f"auroc/L{layer}/{synset}"] == sets[layer].probes[synset].metrics["auroc"]
            )
        assert f"diag/L{layer}/classifier/mean_pairwise_cosine" in metrics
    best = max(sorted(sets), key=lambda la: sets[la].means()["auroc"])
    assert metrics["best_layer_by_auroc"] == best
    assert run.data.params["layer"] == "1,2,3"
    paths = {a.path for a in tracking.client().list_artifacts(run.info.run_id)}
    assert {"classifiers", "eval_prompts.json", "classifiers.json", "plots"} <= paths
    plots = {a.path for a in tracking.client().list_artifacts(run.info.run_id, "plots")}
    assert "plots/auroc_by_layer.png" in plots


def test_out_of_range_layers_fail_before_any_work(tiny_lm, tmp_path):
    config = tiny_config(tmp_path)
    graph = load_concepts(config.concepts.file, limit=1)
    with pytest.raises(LayerIndexError, match="out of range"):
        train_layers(config, tiny_lm, graph, [2, 9])
    assert not list(tmp_path.iterdir())
    assert parse_layers("3,6, 9") == [3, 6, 9]
    for bad in ("", "3;6", "a,b"):
        with pytest.raises(ValueError, match="comma-separated"):
            parse_layers(bad)


def test_diagnostics_cover_every_direction_source(sweep):
    _, graph, sets = sweep
    diag = sets[2].diagnostics
    assert set(diag["sources"]) == {"classifier", "diffmean", "classifier_deformat"}
    for source in diag["sources"].values():
        assert source["concepts"] == graph.synsets
        assert len(source["cosine_matrix"]) == 3
    deformat = diag["sources"]["classifier_deformat"]["cos_format_axis"]
    assert max(abs(v) for v in deformat.values()) < 1e-9
    assert set(diag["cos_probe_diffmean"]) == set(graph.synsets)


def test_phase5_steers_with_the_deformatted_direction(sweep, tiny_lm, one_thread):
    config, graph, _sets = sweep
    deformat = config.model_copy(
        update={
            "steering": config.steering.model_copy(update={"vector_source": "classifier_deformat"})
        }
    )
    probes = load_classifiers(config, graph, tiny_lm.model_id, 2)
    vectors = build_vectors(deformat, tiny_lm, graph, probes, 2)
    for synset, vector in vectors.vectors.items():
        direction = vector.direction.double().numpy()
        assert abs(direction @ probes.format_axis) < 1e-5
        assert direction @ probes.probes[synset].direction() > 0
    probes.format_axis = None
    with pytest.raises(ProbeError, match="format axis"):
        build_vectors(deformat, tiny_lm, graph, probes, 2)


def test_a_repeng_file_steers_the_runs_layer_and_says_what_it_took(
    sweep, tiny_lm, tmp_path, caplog, one_thread
):
    """The run's read of a vector file (``build_vectors``) checks a GGUF's hint against
    the loaded model (gemma3_text) and says which of its layers it took: warned, used."""
    from steering.vector_files import write_control_vector

    config, graph, _sets = sweep
    rng = np.random.default_rng(3)
    layers = {
        s: {la: rng.normal(size=64).astype(np.float32) for la in (1, 2, 3)} for s in graph.synsets
    }
    for synset, directions in layers.items():
        write_control_vector(tmp_path / f"{synset}.gguf", directions, "llama")
    imported = config.model_copy(
        update={
            "steering": config.steering.model_copy(
                update={"vector_source": "file", "vector_file": str(tmp_path)}
            )
        }
    )
    probes = load_classifiers(config, graph, tiny_lm.model_id, 2)
    with caplog.at_level("WARNING", logger="steering.vector_files"):
        vectors = build_vectors(imported, tiny_lm, graph, probes, 2)
    for synset, vector in vectors.vectors.items():
        want = layers[synset][2] / np.linalg.norm(layers[synset][2])
        assert np.allclose(vector.direction.double().numpy(), want, atol=1e-6)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2
    assert "took direction.2 (this run's layer) of the 3 layers each holds" in said[0]
    assert "controlvector.model_hint is 'llama', but the model is 'gemma3_text'" in said[1]
    assert vectors.import_diagnostics() == {"imported_vectors": said}  # for the record
    for directions in layers.values():
        directions.pop(2)
    for synset, directions in layers.items():
        write_control_vector(tmp_path / f"{synset}.gguf", directions, "gemma3_text")
    with pytest.raises(VectorFileError, match=r"no direction.2 for this run's layer 2"):
        build_vectors(imported, tiny_lm, graph, probes, 2)


@pytest.fixture(scope="module")
def planted_lm(tiny_lm):
    """A copy of the tiny Gemma with a large, fixed feature planted on the "?" token's
    embedding: every question carries it in the residual stream, whatever it is about."""
    tokenizer = tiny_lm.tokenizer
    model = copy.deepcopy(tiny_lm.model)
    plant = unit(np.random.default_rng(0).normal(size=model.config.hidden_size))
    embedding = model.get_input_embeddings()
    with torch.no_grad():
        embedding.weight[tokenizer.convert_tokens_to_ids("?")] += torch.tensor(
            5.0 * plant, dtype=embedding.weight.dtype
        )
    return wrap_model(model, tokenizer, "tiny-planted-format"), plant


@pytest.mark.parametrize("train", ["1x1x1", "5x5x5"])
def test_a_planted_format_feature_does_not_dominate_the_direction(
    planted_lm, tmp_path, train, one_thread
):
    lm, plant = planted_lm
    config = tiny_config(tmp_path, "concepts.limit=5", f"classifier.train={train}")
    graph = load_concepts(config.concepts.file, limit=5)
    texts = build_probe_texts(config, graph)
    all_texts = texts.all_texts()
    row = {t: i for i, t in enumerate(all_texts)}
    features = pooled_activations_by_layer(lm, all_texts, [2])[2].numpy()
    probe_set = fit_probe_set(config, texts, features, row, 2, lm.model_id)
    assert probe_set.format_axis @ plant > 0.8  # the format axis finds the planted feature
    matched = [abs(p.direction() @ plant) for p in probe_set.probes.values()]
    # Control: the same feature with the form confounded with the label (positives asked as
    # questions, everything else stated) takes over the direction.
    confounded = []
    for concept in graph.concepts:
        pool = probe_training_set(concept, graph, 16, 10, 16)
        chosen = [
            e
            for e in pool
            if (e.label == 1 and e.format == "question")
            or (e.label == 0 and e.format == "statement")
        ]
        x = pooled_activations_by_layer(lm, [e.text for e in chosen], [2])[2].numpy()
        weight, _ = train_probe(x, np.array([e.label for e in chosen]), seed=0)
        confounded.append(abs(unit(weight) @ plant))
    assert np.mean(confounded) > 0.6, confounded
    assert np.mean(matched) < 0.25, matched
    assert np.mean(matched) < np.mean(confounded) / 3


# ---------------------------------------------------------------------------- embedded model


@pytest.fixture(scope="module")
def setup(tmp_path_factory, mlflow_store, embedded_lm):
    tmp = tmp_path_factory.mktemp("phase4")
    config = load_config("configs/phase5.yaml", [f"classifier.dir={tmp}", "concepts.limit=3"])
    graph = load_concepts(config.concepts.file, limit=3)
    result = train_classifiers(config, embedded_lm, graph, 9)
    return config, graph, result


@integration
def test_probes_beat_chance_on_their_held_out_sets(setup):
    _, _, result = setup
    aurocs = [p.metrics["auroc"] for p in result.probes.values()]
    assert np.mean(aurocs) > 0.6, aurocs
    for probe in result.probes.values():
        m = probe.metrics
        assert m["n_eval"] == 40  # balanced test split: 20 positives, 20 negatives
        assert sum(m["confusion_raw"].values()) == sum(m["confusion_calibrated"].values()) == 40


@integration
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
        assert probe.metrics == other.metrics
        np.testing.assert_array_equal(probe.weight, other.weight)


@integration
def test_classifier_files_are_portable_and_checked(setup, embedded_lm):
    config, graph, result = setup
    directory = classifier_dir(config, embedded_lm.model_id, 9, graph_key(graph))
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


@integration
def test_one_mlflow_run_with_metrics_and_artefacts(setup):
    config, graph, result = setup
    run = tracking.get_run(result.run_id)
    assert run.info.experiment_id == tracking.experiment_id(config.tracking.classifier_experiment)
    for key in ("mean_f1_calibrated", "mean_f1_raw", "mean_auroc", "mean_ap"):
        assert key in run.data.metrics
    assert "diag/classifier/mean_pairwise_cosine" in run.data.metrics
    for synset in graph.synsets:
        for key in ("f1_calibrated", "f1_raw", "auroc", "ap"):
            assert f"{key}/{synset}" in run.data.metrics
    paths = {a.path for a in tracking.client().list_artifacts(result.run_id)}
    assert {"classifiers", "concept_graph.json", "classifiers.json"} <= paths
    plots = {a.path for a in tracking.client().list_artifacts(result.run_id, "plots")}
    assert {"plots/confusion_matrices.png", "plots/direction_cosines.png"} <= plots


@integration
def test_missing_classifier_without_auto_train_names_make_classifiers(embedded_lm, tmp_path):
    config = load_config(
        "configs/phase5.yaml", [f"classifier.dir={tmp_path}", "classifier.auto_train=false"]
    )
    graph = load_concepts(config.concepts.file, limit=1)
    with pytest.raises(ProbeError, match="make classifiers"):
        ensure_classifiers(config, embedded_lm, graph, 9)


def test_graphs_with_different_neutral_pools_never_share_a_classifier_folder():
    """The top-50 graph's probes for person.n.01 were trained on another neutral pool than
    the top-10 graph's, so a run on one must not load the other's (it did, silently)."""
    from experiments.concepts import load_concepts
    from experiments.config import load_config

    config = load_config("configs/phase5.yaml")
    top10 = load_concepts("data/concepts/wordnet_top10.json")
    top50 = load_concepts("data/concepts/wordnet_top50.json")
    assert top10.neutral_pool != top50.neutral_pool
    assert graph_key(top10) != graph_key(top50)
    assert classifier_dir(config, "m", 9, graph_key(top10)) != classifier_dir(
        config, "m", 9, graph_key(top50)
    )
    # A limit of the same graph draws the same texts, so it reuses the folder.
    assert graph_key(load_concepts("data/concepts/wordnet_top10.json", limit=3)) == graph_key(top10)
    texts = build_probe_texts(config, load_concepts("data/concepts/wordnet_top10.json", limit=2))
    assert texts.graph_id == graph_key(top10)


def test_a_bf16_model_does_not_reuse_probes_scored_in_fp32(sweep, tiny_lm):
    # The sweep trained fp32 probes for this config; the same weights in bf16 give other
    # activations, so their F1 is not this model's: a separate folder, and a clear refusal
    # of the fp32 probes.
    config, graph, sets = sweep
    bf16 = wrap_model(
        copy.deepcopy(tiny_lm.model).to(torch.bfloat16), tiny_lm.tokenizer, tiny_lm.model_id
    )
    assert tiny_lm.probe_id == tiny_lm.model_id
    assert bf16.probe_id == f"{tiny_lm.model_id}@bfloat16"
    fp32_dir = classifier_dir(config, tiny_lm.probe_id, 2, graph_key(graph))
    bf16_dir = classifier_dir(config, bf16.probe_id, 2, graph_key(graph))
    assert sets[2].directory == fp32_dir and bf16_dir != fp32_dir
    no_training = config.model_copy(
        update={"classifier": config.classifier.model_copy(update={"auto_train": False})}
    )
    with pytest.raises(ProbeError, match="no classifier"):
        ensure_classifiers(no_training, bf16, graph, 2)
    with pytest.raises(ProbeError, match="bfloat16"):
        next(iter(sets[2].probes.values())).check_compatible(bf16.probe_id, 2)
