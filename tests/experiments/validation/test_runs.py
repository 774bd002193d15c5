"""Finding and reading a finished Phase 5 run: thresholds, generations, --run latest."""

from __future__ import annotations

import json
import uuid

import pytest

from experiments import tracking
from experiments.record import RunRecord
from experiments.rundir import RunDir
from experiments.validation.errors import ValidationInputError
from experiments.validation.human.export import export_samples
from experiments.validation.runs import phase5_parent


def write_record(folder: RunDir, config) -> None:
    folder.write_record(
        RunRecord(
            run_id=folder.run_id,
            experiment=config.tracking.experiment,
            config=config,
            model_id="tiny",
            layer=1,
            alpha=1.0,
            beta=0.2,
        )
    )


def test_thresholds_come_from_the_run_record_first(mlflow_store, tmp_path, kit):
    run_id, _ = kit.make_run(tmp_path, config_overrides=["criteria.human_r_pass=0.6"])
    parent = phase5_parent(run_id)
    assert parent.criteria.human_r_pass == 0.6  # config.yaml, not the 0.7 in the params
    record_config = kit.run_config(tmp_path / "res", ["criteria.human_r_pass=0.95"])
    write_record(parent.folder, record_config)
    assert phase5_parent(run_id).criteria.human_r_pass == 0.95
    assert phase5_parent(run_id).experiment == kit.EXPERIMENT


def test_an_untyped_record_falls_back_to_config_yaml(mlflow_store, tmp_path, kit):
    run_id, _ = kit.make_run(tmp_path, config_overrides=["criteria.panel_r_min=0.4"])
    folder = phase5_parent(run_id).folder
    untyped = {"run_id": run_id, "config": {"criteria": {"panel_r_min": 0.9}}}
    folder.file(RunDir.RECORD).write_text(json.dumps(untyped))
    assert phase5_parent(run_id).criteria.panel_r_min == 0.4


def test_a_run_elsewhere_is_read_from_its_artefacts(mlflow_store, tmp_path, kit):
    run_id, records = kit.make_run(
        tmp_path, config_overrides=["criteria.human_r_pass=0.8"], local=False
    )
    parent = phase5_parent(run_id)
    assert not parent.folder.exists()
    assert parent.criteria.human_r_pass == 0.8  # the config.yaml artefact
    assert [r.key for r in parent.scored_generations()] == sorted(r["key"] for r in records)
    # A run record artefact wins over config.yaml.
    config = kit.run_config(tmp_path / "res", ["criteria.human_r_pass=0.85"])
    record_dir = RunDir(tmp_path / "record", run_id).create()
    write_record(record_dir, config)
    tracking.client().log_artifact(run_id, str(record_dir.file(RunDir.RECORD)))
    assert phase5_parent(run_id).criteria.human_r_pass == 0.85
    result = export_samples(run_id, n=12, seed=0)
    assert result.n == 12 and result.csv_path.parent == parent.folder.human


def test_generations_are_joined_with_scores(mlflow_store, tmp_path, kit):
    """A new-style folder keeps Δ in scores.jsonl; old-style generations hold it."""
    run_id, records = kit.make_run(tmp_path)
    folder = phase5_parent(run_id).folder
    scores = [{"key": r["key"], "delta": r["delta"]} for r in records[:-3]]
    bare = [{k: v for k, v in r.items() if k != "delta"} for r in records]
    folder.file(RunDir.GENERATIONS).write_text("".join(json.dumps(r) + "\n" for r in bare))
    folder.write_scores(scores)
    got = phase5_parent(run_id).scored_generations()
    assert len(got) == len(records) - 3  # unscored generations are left out
    by_key = {r["key"]: r for r in records}
    assert all(g.delta == by_key[g.key]["delta"] for g in got)
    folder.file(RunDir.SCORES).write_text("")
    with pytest.raises(ValidationInputError, match="no scored generations"):
        phase5_parent(run_id).scored_generations()


def test_a_run_without_stored_config_is_refused(mlflow_store, tmp_path, kit):
    run_id, _ = kit.make_run(tmp_path)
    folder = phase5_parent(run_id).folder
    folder.file(RunDir.CONFIG).unlink()
    with pytest.raises(ValidationInputError, match="no stored config"):
        _ = phase5_parent(run_id).criteria


def test_latest_is_the_newest_finished_top_level_run(mlflow_store):
    experiment = f"latest-{uuid.uuid4().hex[:8]}"
    c = tracking.client()

    def run(name: str, parent: str | None = None, status: str = "FINISHED") -> str:
        run_id = tracking.start_run(experiment, name, tags={"phase": "5"}, parent_run_id=parent)
        if status != "RUNNING":
            tracking.end_run(run_id, status)
        return run_id

    run("old")
    newest = run("newest")
    for i in range(60):  # more children than the old 50-run window, all newer
        run(f"child {i}", parent=newest)
    run("still running", status="RUNNING")
    run("failed", status="FAILED")
    assert tracking.latest_parent_run(experiment) == newest
    assert phase5_parent("latest", experiment).run_id == newest
    with pytest.raises(ValidationInputError, match="no finished Phase 5 run"):
        phase5_parent("latest", f"{experiment}-missing")
    assert c.get_experiment_by_name(f"{experiment}-missing") is None  # not created
