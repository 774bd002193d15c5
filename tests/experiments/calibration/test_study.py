"""The Phase 6 study end to end on the tiny random Gemma (the ``--quick`` shape)."""

from __future__ import annotations

import pytest

from experiments import tracking
from experiments.calibration import QUICK
from experiments.calibration.study import run_calibration
from experiments.config import load_config
from experiments.record import CalibrationRecord
from experiments.rundir import RunDir
from experiments.strength_range import (
    BETA_TAG,
    StrengthLimits,
    StrengthRange,
    Unsteered,
    save_range,
)


def swept(model_id: str, low: float, high: float, source: str = "classifier") -> StrengthRange:
    """A strength sweep's record of the model at layer 2: coherent from low to high."""
    return StrengthRange(
        model_id=model_id, layer=2, mode="additive", vector_source=source, alpha=1.0,
        grid=[0.05, 0.1, 0.2], concepts=["dog.n.01"], prompts=4, max_new_tokens=6, seed=0,
        limits=StrengthLimits(),
        unsteered=Unsteered(perplexity=20.0, near_empty=0.0, distinct_2=1.0),
        steps=[], low=low, high=high, beta=high,
    )  # fmt: skip


@pytest.fixture(scope="module")
def study(tmp_path_factory, mlflow_store, tiny_lm, embedder):
    """The quick study with both sources, the model's strength range recorded (for the
    classifier's directions only) by a sweep in another classifier set's folder."""
    import torch

    tmp = tmp_path_factory.mktemp("phase6")
    save_range(tmp / "cls" / "a-phase5-set", swept(tiny_lm.probe_id, 0.05, 0.1))
    config = load_config(
        "configs/phase6.yaml",
        [
            "layer=2",
            "calibration.sources=['classifier', 'diffmean']",
            "generation.max_new_tokens=6",
            f"classifier.dir={tmp / 'cls'}",
            f"calibration.results_dir={tmp / 'res'}",
        ],
        overlays=[QUICK],
    )
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return config, run_calibration(config, lm=tiny_lm, embedder=embedder)
    finally:
        torch.set_num_threads(before)


def test_the_curve_has_one_row_per_probe_set_and_concept(study):
    config, result = study
    curve = result.curve
    # 2 sizes × 1 seed × 2 sources = 4 probe sets; 3 concepts each.
    assert curve["tag"].nunique() == 4 and len(curve) == 12
    assert set(curve["size"]) == {"1x1x1", "2x2x2"}
    assert curve["auroc"].between(0, 1).all()
    assert curve["beta"].isin(config.selection.beta_grid).all()


def test_each_source_steers_inside_the_range_recorded_for_it(study):
    """The quick grid is [0.1, 0.2]; the classifier's range is 0.05-0.1 and the mean
    difference has none: its grid stays the config's."""
    _config, result = study
    curve = result.curve
    assert set(curve.loc[curve["source"] == "classifier", "beta"]) == {0.1}
    assert curve.loc[curve["source"] == "diffmean", "beta"].isin([0.1, 0.2]).all()
    import json

    stored = json.loads((result.run_dir / RunDir.STRENGTH).read_text())
    assert stored["L2-classifier"]["beta_grid"] == [0.1]
    assert stored["L2-classifier"]["from"] == "range"  # 0.2 was not given on a command line
    assert stored["L2-diffmean"]["beta_grid"] == [0.1, 0.2]
    assert stored["L2-diffmean"]["from"] == "config"
    tag = tracking.get_run(result.run_id).data.tags[BETA_TAG]
    assert "L2-classifier: β 0.1 from the recorded range 0.05-0.1" in tag
    assert "a-phase5-set" in tag  # where the range was found
    assert curve["effect_above_null"].notna().all()


def test_rows_that_do_not_depend_on_the_probe_set_are_generated_once(study):
    config, result = study
    generations = RunDir(config.calibration.results_dir, result.run_id).read_generations()
    keys = [g["key"] for g in generations]
    assert len(keys) == len(set(keys))
    unsteered = [g for g in generations if g["strength"] == 0]
    # 3 concepts × 4 prompts × 1 sample, whatever the number of probe sets.
    assert len(unsteered) == 3 * 4
    tagged = {g.get("vectors") for g in generations if g["arm"] == "concept" and g["strength"]}
    assert tagged == set(result.curve["tag"])


def test_the_study_is_logged_with_a_parent_and_one_child_per_probe_set(study):
    config, result = study
    run = tracking.get_run(result.run_id)
    assert run.info.status == "FINISHED" and run.data.tags["phase"] == "6"
    assert any(k.startswith("minimum_effective.") for k in run.data.tags)
    children = tracking.child_runs(result.run_id, config.calibration.experiment)
    assert {c.data.tags["probe_set"] for c in children} == set(result.curve["tag"])
    artifacts = {a.path for a in tracking.client().list_artifacts(result.run_id)}
    assert {"curve.json", "analysis.json", "summary.md"} <= artifacts
    assert result.record.results, "at least one predictor was analysed"
    stored = CalibrationRecord.parse((result.run_dir / RunDir.ANALYSIS).read_text())
    assert stored == result.record  # the folder's record is the one returned


def test_the_answer_heads_the_folder_and_the_description(study):
    _config, result = study
    from experiments.answer import answer_markdown, reading, status_word
    from experiments.calibration.answer import answer_of

    text = (result.run_dir / RunDir.ANSWER).read_text(encoding="utf-8")
    assert text.startswith(f"## The answer (run `{result.run_id}`)")
    answer = answer_of(result.record)
    assert text == answer_markdown(answer)
    assert answer.verdicts and all("f1_calibrated" in v.label for v in answer.verdicts)
    for v in answer.verdicts:  # the headline and the table use one word and one reading
        assert f"{v.claim}: {status_word(v.status)}" in answer.headlines()[v.group]
        assert f"**{status_word(v.status)}** | {reading(v)} |" in text
    # MLflow's copy (artefact and description) links the figures to the run's plots/.
    experiment = tracking.get_run(result.run_id).info.experiment_id
    shown = answer_markdown(
        answer, lambda name: tracking.ui_path(experiment, result.run_id, artifact=f"plots/{name}")
    )
    with open(tracking.client().download_artifacts(result.run_id, RunDir.ANSWER)) as f:
        assert f.read() == shown
    note = tracking.get_run(result.run_id).data.tags[tracking.NOTE_TAG]
    assert note.startswith(shown) and "# Phase 6 calibration study" in note
    artifacts = {a.path for a in tracking.client().list_artifacts(result.run_id)}
    assert {RunDir.ANSWER, RunDir.CRITERIA} <= artifacts


def test_the_experiment_description_leads_with_the_latest_study(study):
    config, result = study
    experiment = tracking.client().get_experiment_by_name(config.calibration.experiment)
    note = experiment.tags[tracking.NOTE_TAG]
    link = f"#/experiments/{experiment.experiment_id}/runs/{result.run_id}/artifacts/answer.md"
    assert note.startswith(f"**Latest answer** ([open]({link}")
    first = note.split("\n")[0]
    assert "slope of the effect above null on f1_calibrated: both signs, classifier (L" in first
    assert tracking.run_ui_url(result.run_id).endswith(
        f"/runs/{result.run_id}/artifacts/answer.md?workflowType=machine_learning"
    )


def test_a_resumed_study_steers_with_the_strengths_it_began_with(
    tmp_path, tiny_lm, embedder, one_thread, interrupted_run
):
    """A range recorded while a study is interrupted does not move the study: the β and
    grid of its start are in its folder (strength.json) and the resume reads them."""
    config = load_config(
        "configs/phase6.yaml",
        [
            "layer=2",
            "generation.max_new_tokens=4",
            f"classifier.dir={tmp_path / 'cls'}",
            f"calibration.results_dir={tmp_path / 'res'}",
        ],
        overlays=[QUICK],
    )
    where = tmp_path / "cls" / "a-phase5-set"
    save_range(where, swept(tiny_lm.probe_id, 0.05, 0.1))
    interrupted = interrupted_run(
        lambda on_batch: run_calibration(config, lm=tiny_lm, embedder=embedder, on_batch=on_batch),
        config.calibration.experiment,
    )
    save_range(where, swept(tiny_lm.probe_id, 0.2, 0.3))  # a later sweep says otherwise
    resumed = run_calibration(config, resume=interrupted, lm=tiny_lm, embedder=embedder)
    assert resumed.run_id == interrupted
    assert set(resumed.curve["beta"]) == {0.1}  # the start's grid [0.1], not [0.2]
    # a new study takes the range recorded now
    fresh = run_calibration(config, lm=tiny_lm, embedder=embedder)
    assert set(fresh.curve["beta"]) == {0.2}
