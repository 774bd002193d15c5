"""Phase 5 end to end on the embedded 270M model, against a real MLflow store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments import tracking
from experiments.config import load_config
from experiments.kernel.plan import row_seed
from experiments.phase5.run import rescore, run_phase5
from experiments.record import RECORD_VERSION, RunRecord
from experiments.rundir import RunDir
from experiments.tracking.context import DECODE_TAG

GENERATIONS_FILE = RunDir.GENERATIONS
V2_NAMES = ("direction", "effect_above_null", "predictor_vs_effect", "specificity")

pytestmark = pytest.mark.integration


def small_config(tmp_path, *extra: str):
    return load_config(
        "configs/phase5.yaml",
        [
            "concepts.limit=2",
            "generation.max_new_tokens=8",
            "generation.batch_size=6",
            f"classifier.dir={tmp_path / 'classifiers'}",
            f"tracking.results_dir={tmp_path / 'results'}",
            *extra,
        ],
    )


@pytest.fixture(scope="module")
def finished(tmp_path_factory, mlflow_store, embedded_lm, embedder):
    tmp = tmp_path_factory.mktemp("phase5")
    config = small_config(tmp)
    return config, run_phase5(config, lm=embedded_lm, embedder=embedder)


def test_parent_and_child_runs_follow_the_layout(finished):
    config, result = finished
    parent = tracking.get_run(result.run_id)
    assert parent.info.status == "FINISHED"
    params = parent.data.params
    for key in (
        "model",
        "layer",
        "mode",
        "vector_source",
        "strengths",
        "seed",
        "config_hash",
        "alpha",
        "beta",
    ):
        assert key in params, key
    assert params["layer"] == "9" and params["vector_source"] == "classifier"
    tags = parent.data.tags
    assert "mlflow.source.git.commit" in tags and "version.torch" in tags
    assert tags[DECODE_TAG] == "cpu"  # the policy the texts were decoded with
    assert tags["mlflow.user"] and tags["mlflow.source.type"] == "LOCAL"
    metrics = parent.data.metrics
    assert {"delta_mean/s_neg1.0", "delta_mean/s_0.0", "delta_mean/s_pos1.0"} <= set(metrics)
    # thresholds are settings: parameters, no longer metrics
    assert params["seed/criterion/c1_direction/threshold"] == "0.8"
    assert not any(k.endswith("/threshold") for k in metrics)
    assert parent.data.tags["criterion.c4_human"] == "pending"
    assert "criterion/c4_human" not in metrics  # pending is never logged as a pass/fail
    children = [
        c
        for c in tracking.child_runs(result.run_id, config.tracking.experiment)
        if "cell" in c.data.tags  # not the GenAI evaluation child
    ]
    assert len(children) == 2 * 3  # concepts × strengths
    cells = {c.data.tags["cell"] for c in children}
    assert len(cells) == 6
    child = children[0]
    assert {"concept", "strength"} <= set(child.data.params)
    assert "delta_mean" in child.data.metrics
    artifacts = {a.path for a in tracking.client().list_artifacts(child.info.run_id)}
    assert "generations.json" in artifacts


def test_results_files_and_metrics_are_consistent(finished):
    _, result = finished
    out = result.results_dir
    for name in (
        "steering_results.json",
        "summary.md",
        "criteria.csv",
        GENERATIONS_FILE,
        "delta_vs_strength.png",
        "f1_vs_magnitude.png",
        "delta_distribution.png",
    ):
        assert (out / name).exists(), name
    records = result.records
    assert len(records) == 2 * 3 * 3
    # Δ is the difference of the two similarities, per generation.
    assert ((records["core_sim"] - records["neg_sim"] - records["delta"]).abs() < 1e-6).all()
    # Paired by concept, prompt and sample: the baseline row has zero shift.
    assert (records[records["strength"] == 0]["shift"].abs() < 1e-12).all()
    # The prompt is stripped: no generation starts by repeating its prompt verbatim.
    assert not any(t.startswith(p) for t, p in zip(records["text"], records["prompt"], strict=True))
    data = json.loads((out / "steering_results.json").read_text())
    assert set(data["criteria"]) == {
        "c1_direction",
        "c2_magnitude",
        "c3_f1_correlation",
        "c4_human",
        *(f"v2_{name}_{sign}" for name in V2_NAMES for sign in ("pos", "neg")),
        "v2_c4_human_or_panel",  # pending until Parts B and C
    }
    assert data["criteria"]["v2_c4_human_or_panel"]["status"] == "pending"
    # Two concepts cannot give a correlation: not evaluable, never NaN or a silent pass.
    assert data["criteria"]["c3_f1_correlation"]["status"] == "not_evaluable"


def test_same_config_and_seed_give_the_same_numbers_and_resume_loses_nothing(
    tmp_path, finished, embedded_lm, embedder, interrupted_run
):
    _, reference = finished
    fresh = small_config(tmp_path)
    interrupted = interrupted_run(
        lambda on_batch: run_phase5(fresh, lm=embedded_lm, embedder=embedder, on_batch=on_batch),
        fresh.tracking.experiment,
    )
    partial = (tmp_path / "results" / interrupted / GENERATIONS_FILE).read_text().splitlines()
    assert len(partial) == 6  # the first batch was kept
    resumed = run_phase5(fresh, resume=interrupted, lm=embedded_lm, embedder=embedder)
    assert resumed.run_id == interrupted
    assert tracking.get_run(interrupted).info.status == "FINISHED"
    a = reference.records.set_index("key").sort_index()
    b = resumed.records.set_index("key").sort_index()
    assert list(a.index) == list(b.index)
    assert list(a["text"]) == list(b["text"])
    assert (a["delta"] - b["delta"]).abs().max() < 1e-5


def test_row_seed_is_shared_across_strengths_only():
    assert row_seed(0, "dog.n.01", 0, 0) == row_seed(0, "dog.n.01", 0, 0)
    assert row_seed(0, "dog.n.01", 0, 0) != row_seed(0, "dog.n.01", 1, 0)
    assert row_seed(0, "dog.n.01", 0, 0) != row_seed(1, "dog.n.01", 0, 0)


def test_resume_of_an_unknown_run_is_a_clear_error(mlflow_store, tmp_path):
    with pytest.raises(LookupError, match="no MLflow run"):
        run_phase5(small_config(tmp_path), resume="0123456789abcdef")


def test_resume_without_local_results_is_a_clear_error(finished, tmp_path):
    _, result = finished
    with pytest.raises(LookupError, match="cannot be resumed"):
        run_phase5(resume=result.run_id, results_dir=tmp_path / "elsewhere")


def test_the_run_remembers_its_own_folder(finished):
    """Resume and rescore find a run started with a non-default results folder."""
    config, result = finished
    run = tracking.get_run(result.run_id)
    located = RunDir.locate(run)
    assert located.path == result.results_dir.resolve()
    assert located.load_config() == config


def test_the_record_is_typed_and_versioned(finished):
    config, result = finished
    text = (result.results_dir / RunDir.RECORD).read_text()
    record = RunRecord.parse(text)
    assert record.version == RECORD_VERSION and record.format == "steer-eval/phase5-run"
    assert record.config == config
    assert record.n_generations == 18 and record.layer == 9
    assert set(record.predictors) == set(result.records["concept"])
    assert record.criteria["c4_human"].status == "pending"
    assert record.criteria["c1_direction"].threshold == config.criteria.direction_min_fraction


def test_scores_live_beside_generations_and_rescore_reproduces_them(finished, embedder):
    _, result = finished
    run_dir = RunDir.locate(tracking.get_run(result.run_id))
    generations = run_dir.read_generations()
    scores = run_dir.read_scores()
    assert {g["key"] for g in generations} == {s["key"] for s in scores}
    assert "delta" not in generations[0] and "text" not in scores[0]
    before = {s["key"]: s for s in scores}
    again = rescore(result.run_id, embedder=embedder)
    after = {s["key"]: s for s in run_dir.read_scores()}
    assert after == before  # bit-identical: same texts, same chunks, same centroids
    assert again.record.criteria == result.record.criteria
    assert tracking.get_run(result.run_id).data.tags["rescored"] == "true"


def test_a_run_of_the_one_config_layout_still_rescores(finished, embedder):
    """Runs from before a config per phase stored every phase's sections and no phase:."""
    import yaml

    config, result = finished
    run_dir = RunDir.locate(tracking.get_run(result.run_id))
    old_file = Path(__file__).resolve().parents[1] / "old_layout" / "phase5.yaml"
    old = yaml.safe_load(old_file.read_text())

    def old_layout(data: dict) -> dict:
        data = {k: v for k, v in data.items() if k != "phase"}
        return {**data, "calibration": old["calibration"], "identify": old["identify"]}

    stored = yaml.safe_load(run_dir.file(RunDir.CONFIG).read_text())
    run_dir.file(RunDir.CONFIG).write_text(yaml.safe_dump(old_layout(stored), sort_keys=False))
    record = json.loads(run_dir.file(RunDir.RECORD).read_text())
    record["config"] = old_layout(record["config"])
    run_dir.file(RunDir.RECORD).write_text(json.dumps(record))
    again = rescore(result.run_id, embedder=embedder)
    assert again.record.config == config
    assert again.record.config.config_hash() == config.config_hash()
    assert again.record.criteria == result.record.criteria
