"""What a finished run shows where researchers look: ``answer.md`` in the folder, the
answer at the top of the MLflow description, the v2 metrics with their bounds, the
answer as structured ``--json`` (tiny random Gemma, real sqlite store)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from experiments import tracking
from experiments.answer import answer_markdown
from experiments.cli import app
from experiments.config import load_config
from experiments.pipeline.answer import answer_of
from experiments.pipeline.run import run_phase5
from experiments.rundir import RunDir


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, mlflow_store, tiny_lm, embedder, single_threaded):
    tmp = tmp_path_factory.mktemp("views")
    config = load_config(
        "configs/phase5.yaml",
        [
            "concepts.limit=3",
            "generation.max_new_tokens=6",
            "generation.batch_size=16",
            "layer=2",
            "controls.random_directions=1",
            "criteria.n_boot=200",
            f"classifier.dir={tmp / 'cls'}",
            f"tracking.results_dir={tmp / 'res'}",
        ],
    )
    with single_threaded():
        return config, run_phase5(config, lm=tiny_lm, embedder=embedder)


def test_answer_md_is_the_answer_of_the_record(tiny_run):
    _config, result = tiny_run
    folder = RunDir(result.results_dir.parent, result.run_id)
    figures = tuple(sorted(p.name for p in folder.path.glob("*.png")))
    text = folder.file(RunDir.ANSWER).read_text(encoding="utf-8")
    assert text == answer_markdown(answer_of(folder.read_record(), figures))
    assert "| s > 0 | effect above null (gated) |" in text


def test_the_run_description_starts_with_the_answer_and_the_metrics_have_bounds(tiny_run):
    _config, result = tiny_run
    run = tracking.get_run(result.run_id)
    note = run.data.tags[tracking.NOTE_TAG]
    assert note.startswith(f"## The answer (run `{result.run_id}`)")
    assert note.index("## The answer") < note.index("# Phase 5 run")
    intervals = result.record.statistics["intervals"]
    for key in ("v2_effect_above_null_pos", "v2_predictor_vs_effect_neg"):
        for bound in ("low", "high"):
            assert run.data.metrics[f"v2/criterion/{key}/{bound}"] == pytest.approx(
                intervals[key][bound]
            )
        assert f"v2/criterion/{key}/value" in run.data.metrics
    artifacts = {f.path for f in tracking.client().list_artifacts(result.run_id)}
    assert RunDir.ANSWER in artifacts


def test_rescore_json_carries_the_answer_as_fields(tiny_run, single_threaded):
    _config, result = tiny_run
    # One torch thread as in the run: the embedder's fp32 sums differ in the last bits
    # between thread counts on some CPUs (seen on an AMX Xeon), and so would the interval.
    with single_threaded():
        out = CliRunner().invoke(app, ["rescore", result.run_id, "--json"], catch_exceptions=False)
    assert out.exit_code == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["phase"] == "phase5" and data["run_id"] == result.run_id
    crit = data["answer"]["criteria"]["v2_effect_above_null_pos"]
    stored = result.record.statistics["intervals"]["v2_effect_above_null_pos"]
    assert crit["low"] == pytest.approx(stored["low"]) and crit["high"] == pytest.approx(
        stored["high"]
    )
    assert crit["status"] in {"pass", "fail", "inconclusive"} and crit["threshold"] == 0.15
    assert set(data["answer"]["seed_criteria"]) >= {"c1_direction", "c3_f1_correlation"}
    assert data["answer"]["question"].startswith("Does a concept classifier's quality")


def test_the_reviewer_figures_are_written_and_logged(tiny_run):
    _config, result = tiny_run
    folder = RunDir(result.results_dir.parent, result.run_id)
    for name in ("predictor_vs_effect.png", "effect_forest.png"):
        assert folder.file(name).stat().st_size > 10_000
    plots = {f.path for f in tracking.client().list_artifacts(result.run_id, "plots")}
    assert {"plots/predictor_vs_effect.png", "plots/effect_forest.png"} <= plots


def test_each_concept_has_its_effect_above_null_with_an_interval_over_its_units(tiny_run):
    config, result = tiny_run
    units = len(config.generation.prompts) * config.generation.samples_per_prompt
    for values in result.record.per_concept.values():
        for sign in ("pos", "neg"):
            low, high = values[f"above_null_{sign}_low"], values[f"above_null_{sign}_high"]
            assert low <= high and values[f"above_null_{sign}_n"] == units
            assert values[f"above_null_{sign}"] is not None


def test_the_predictor_interval_is_rebuilt_from_the_records_counts():
    from experiments.pipeline.per_concept import predictor_interval
    from metrics.stats import bootstrap_f1

    # tp 12, fn 8, fp 5, tn 15 on 20 + 20 test texts.
    metrics = {
        "recall_calibrated": 12 / 20,
        "accuracy_calibrated": 27 / 40,
        "n_test_pos": 20.0,
        "n_test_neg": 20.0,
        "auroc": 0.8,
    }
    expected = bootstrap_f1(12, 8, 5, 15)
    assert predictor_interval(metrics, "f1_calibrated") == (expected.low, expected.high)
    assert predictor_interval(metrics, "auroc") == (None, None)
    assert predictor_interval({"recall_raw": 0.5}, "f1_raw") == (None, None)


def test_every_printed_address_opens_on_the_answer(tiny_run):
    from experiments.cli.ui import addresses

    config, result = tiny_run
    experiment = tracking.experiment_id(config.tracking.experiment)
    latest = tracking.latest_parent_run(config.tracking.experiment, "5")
    found = dict(addresses())
    assert found["newest Phase 5 run, on its answer"] == tracking.ui_url(
        experiment, latest, artifact=RunDir.ANSWER
    )
    assert found["newest Phase 5 run, on its answer"].endswith(
        f"/runs/{latest}/artifacts/answer.md?workflowType=machine_learning"
    )
    assert tracking.run_ui_url(result.run_id).endswith(
        f"#/experiments/{experiment}/runs/{result.run_id}/artifacts/answer.md"
        "?workflowType=machine_learning"
    )
    bare = tracking.start_run(config.tracking.experiment, "no answer", tags={"phase": "x"})
    assert tracking.run_ui_url(bare).endswith(f"/runs/{bare}?workflowType=machine_learning")


def test_the_experiment_description_leads_with_the_latest_answer(tiny_run):
    config, result = tiny_run
    experiment = tracking.client().get_experiment_by_name(config.tracking.experiment)
    note = experiment.tags[tracking.NOTE_TAG]
    link = f"#/experiments/{experiment.experiment_id}/runs/{result.run_id}/artifacts/answer.md"
    assert note.startswith(f"**Latest answer** ([open]({link}")
    first = note.split("\n")[0]
    assert "predictor → effect above null (r): s > 0 **" in first and len(first) < 400
    assert tracking.EXPERIMENT_NOTES[config.tracking.experiment] in note


def test_the_steered_generations_are_in_mlflows_genai_evaluation(tiny_run):
    """After the run and its rescore: one evaluation child whose scorers, one per measure
    and sign, have the v2 estimates of their sign as means; each steered trace carries
    one assessment per scorer of its own sign and none of the other's."""
    import json

    import mlflow

    from experiments.pipeline.evaluation import MEASURES
    from experiments.tracking.evaluation import EVALUATION_TAG

    config, result = tiny_run
    children = tracking.child_runs(result.run_id, config.tracking.experiment)
    evaluations = [c for c in children if c.data.tags.get(EVALUATION_TAG)]
    assert len(evaluations) == 1
    run = evaluations[0]
    assert run.data.tags["mlflow.runType"] == "genai_evaluate" and run.info.status == "FINISHED"
    intervals = result.record.statistics["intervals"]
    for sign in ("pos", "neg"):
        direction = intervals[f"v2_direction_{sign}"]["estimate"]
        assert run.data.metrics[f"moved_as_steered_{sign}/mean"] == pytest.approx(direction)
        effect = intervals[f"v2_effect_above_null_{sign}"]["estimate"]
        assert run.data.metrics[f"effect_above_null_{sign}/mean"] == pytest.approx(effect)
    assert "moved_as_steered/mean" not in run.data.metrics  # no pool of both signs
    parent = tracking.get_run(result.run_id).data.metrics
    assert parent["evaluation/gate_pass_pos/mean"] == run.data.metrics["gate_pass_pos/mean"]
    assert parent["time/evaluation"] > 0
    folder = RunDir(result.results_dir.parent, result.run_id)
    mapping = json.loads(folder.file(RunDir.TRACES).read_text())
    for sign, other, mark in (("pos", "neg", "|s+1.000"), ("neg", "pos", "|s-1.000")):
        steered = [k for k in mapping if mark in k and "random" not in k]
        assert steered
        for key in steered:
            names = [a.name for a in mlflow.get_trace(mapping[key]).info.assessments]
            for measure in MEASURES:
                assert names.count(f"{measure}_{sign}") == 1, (key, names)
                assert names.count(f"{measure}_{other}") == 0, (key, names)


def test_traces_carry_the_twin_s_text_and_the_generation_s_times(tiny_run):
    """A steered trace shows its unsteered twin's text, and every span starts and ends
    when its batch was generated (generations.jsonl), not when it was logged."""
    import json

    import mlflow

    _config, result = tiny_run
    folder = RunDir(result.results_dir.parent, result.run_id)
    mapping = json.loads(folder.file(RunDir.TRACES).read_text())
    rows = {g["key"]: g for g in folder.read_generations()}
    checked = 0
    for key, trace_id in mapping.items():
        row = rows[key]
        span = mlflow.get_trace(trace_id).data.spans[0]
        assert span.start_time_ns == row["started_ns"] and span.end_time_ns == row["ended_ns"]
        assert row["ended_ns"] > row["started_ns"]
        twin = span.attributes.get("unsteered_twin_text")
        if row["strength"] == 0:
            assert twin is None
            continue
        unit = (row["concept"], row["prompt_index"], row["sample"], row["split"])
        base = [
            g
            for g in rows.values()
            if g["strength"] == 0
            and (g["concept"], g["prompt_index"], g["sample"], g["split"]) == unit
        ]
        assert len(base) == 1 and twin == base[0]["text"]
        checked += 1
    assert checked > 0
