"""``tracking.child_runs``: per-cell results always reach the parent's ``cells.json``;
child runs follow the mode (per cell, per concept, none)."""

from __future__ import annotations

import pandas as pd
import pytest

from experiments import tracking
from experiments.concepts import load_concepts
from experiments.config import load_config
from experiments.phase5.analyse import strength_label
from experiments.phase5.context import RunContext
from experiments.phase5.publish import log_children
from experiments.phase5.run import run_phase5


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, mlflow_store, tiny_lm, embedder, single_threaded):
    tmp = tmp_path_factory.mktemp("children")
    config = load_config(
        "configs/phase5.yaml",
        [
            "concepts.limit=3",
            "generation.max_new_tokens=6",
            "generation.batch_size=8",
            "layer=2",
            "controls.random_directions=0",
            f"classifier.dir={tmp / 'cls'}",
            f"tracking.results_dir={tmp / 'res'}",
        ],
    )
    with single_threaded():
        return config, run_phase5(config, lm=tiny_lm, embedder=embedder)


def context(config, result, mode: str) -> RunContext:
    """A fresh parent run for the same records, publishing with another ``child_runs``."""
    cfg = config.model_copy(deep=True)
    cfg.tracking.child_runs = mode
    rec = result.record
    return RunContext(
        run_id=tracking.start_run(cfg.tracking.experiment, f"children {mode}"),
        config=cfg,
        graph=load_concepts(cfg.concepts.file, limit=cfg.concepts.limit),
        model_id=rec.model_id,
        layer=rec.layer,
        alpha=rec.alpha,
        predictors=rec.predictors,
    )


def cells(run_id: str) -> pd.DataFrame:
    import mlflow

    path = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="cells.json")
    return pd.read_json(path, orient="split")


def test_per_cell_is_the_default_with_one_child_per_concept_and_strength(tiny_run):
    config, result = tiny_run
    assert config.tracking.child_runs == "per_cell"
    children = tracking.child_runs(result.run_id, config.tracking.experiment)
    assert len([c for c in children if "cell" in c.data.tags]) == 3 * 3
    table = cells(result.run_id)
    assert len(table) == 3 * 3 and {"concept", "strength", "delta_mean"} <= set(table.columns)


def test_per_concept_logs_one_child_per_concept_with_every_strength(tiny_run):
    config, result = tiny_run
    ctx = context(config, result, "per_concept")
    assert log_children(ctx, result.records) == 3
    children = tracking.child_runs(ctx.run_id, config.tracking.experiment)
    assert sorted(c.data.tags["cell"] for c in children) == sorted(ctx.graph.synsets)
    metrics = children[0].data.metrics
    for s in config.steering.strengths:
        assert f"delta_mean/s_{strength_label(s)}" in metrics
    parent_cells = cells(ctx.run_id)
    assert len(parent_cells) == 9
    # The parent's table holds what the per-cell children held.
    default = cells(result.run_id).sort_values(["concept", "strength"]).reset_index(drop=True)
    ours = parent_cells.sort_values(["concept", "strength"]).reset_index(drop=True)
    pd.testing.assert_series_equal(default["delta_mean"], ours["delta_mean"])
    # Publishing again (a resume) adds no second set of children.
    assert log_children(ctx, result.records) == 0


def test_none_logs_no_child_but_keeps_the_cells(tiny_run):
    config, result = tiny_run
    ctx = context(config, result, "none")
    assert log_children(ctx, result.records) == 0
    assert tracking.child_runs(ctx.run_id, config.tracking.experiment) == []
    assert len(cells(ctx.run_id)) == 9
