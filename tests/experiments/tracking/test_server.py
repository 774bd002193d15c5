"""The suite against a real ``mlflow server`` on loopback: a Phase 5 run on the embedded
model and a Ray run on the tiny one, with artefacts proxied by the server."""

from __future__ import annotations

import json

import pytest

from experiments import tracking
from experiments.config import load_config
from experiments.phase5.run import run_phase5
from experiments.rundir import RunDir
from experiments.validation.runs import phase5_parent, stored_config


def served_files(root, run_id: str) -> set[str]:
    return {p.name for p in (root / "mlartifacts").rglob("*") if run_id in p.parts}


def check_parent(result, root, experiment: str, children: int) -> None:
    parent = tracking.get_run(result.run_id)
    assert parent.info.status == "FINISHED"
    location = tracking.client().get_experiment(parent.info.experiment_id).artifact_location
    assert location.startswith("mlflow-artifacts:"), location  # proxied, not a local path
    assert {RunDir.RECORD, "cells.json", RunDir.GENERATIONS} <= served_files(root, result.run_id)
    cells = [c for c in tracking.child_runs(result.run_id, experiment) if "cell" in c.data.tags]
    assert len(cells) == children


@pytest.mark.integration
def test_a_phase5_run_logs_to_the_server(
    mlflow_server, embedded_lm, embedder, tmp_path, monkeypatch
):
    uri, root = mlflow_server
    config = load_config(
        "configs/phase5.yaml",
        [
            "concepts.limit=2",
            "generation.max_new_tokens=8",
            "generation.batch_size=6",
            f"classifier.dir={tmp_path / 'cls'}",
            f"tracking.results_dir={tmp_path / 'res'}",
        ],
    )
    result = run_phase5(config, lm=embedded_lm, embedder=embedder)
    assert tracking.tracking_uri() == uri
    check_parent(result, root, config.tracking.experiment, children=2 * 3)
    # The record comes back through the server when the local folder is gone.
    (result.results_dir / RunDir.RECORD).unlink()
    assert stored_config(phase5_parent(result.run_id)) == result.record.config


def test_a_ray_run_logs_to_the_server(
    mlflow_server, ray_cluster, tiny_model_dir, tiny_from_dir, embedder, tmp_path
):
    _, root = mlflow_server
    config = load_config(
        "configs/phase5.yaml",
        [
            f"model={tiny_model_dir}",
            "device=cpu",
            "layer=2",
            "concepts.limit=3",
            "generation.max_new_tokens=8",
            "generation.batch_size=4",
            "execution.executor=ray",
            "execution.workers=2",
            "execution.cpus_per_worker=0.5",
            "tracking.child_runs=per_concept",
            f"classifier.dir={tmp_path / 'cls'}",
            f"tracking.results_dir={tmp_path / 'res'}",
        ],
    )
    result = run_phase5(config, lm=tiny_from_dir, embedder=embedder)
    check_parent(result, root, config.tracking.experiment, children=3)
    keys = [json.loads(line)["key"] for line in (result.results_dir / RunDir.GENERATIONS).open()]
    assert len(keys) == len(set(keys)) == 3 * 3 * 5
