"""The run lifecycle: a parent run ends FINISHED, KILLED on Ctrl-C, FAILED on an error."""

from __future__ import annotations

import pytest

from experiments import tracking
from experiments.config import load_config
from experiments.kernel.lifecycle import RunError, open_run
from experiments.phase5.run import run_phase5


def tiny_config(tmp_path, *extra: str):
    return load_config(
        "configs/phase5.yaml",
        [
            "concepts.limit=2",
            "generation.max_new_tokens=4",
            "generation.batch_size=4",
            "layer=2",
            "controls.random_directions=0",
            "tracking.traces=false",
            f"classifier.dir={tmp_path / 'cls'}",
            f"tracking.results_dir={tmp_path / 'res'}",
            *extra,
        ],
    )


def newest_status(config) -> str:
    runs = tracking.client().search_runs(
        [tracking.experiment_id(config.tracking.experiment)],
        filter_string="tags.mlflow.parentRunId IS NULL",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return runs[0].info.status


@pytest.mark.parametrize(
    ("raised", "status"), [(KeyboardInterrupt, "KILLED"), (RuntimeError, "FAILED")]
)
def test_an_interrupted_run_is_killed_and_a_broken_one_failed(
    raised, status, tmp_path, mlflow_store, tiny_lm, embedder, one_thread
):
    config = tiny_config(tmp_path)

    def breaks(done: int, total: int) -> None:
        raise raised("on purpose")

    with pytest.raises(raised):
        run_phase5(config, lm=tiny_lm, embedder=embedder, on_batch=breaks)
    assert newest_status(config) == status


def test_a_session_without_a_started_run_logs_nothing(tmp_path, mlflow_store, tiny_lm, embedder):
    """The bench's workload prepares a run without opening one in MLflow."""
    config = tiny_config(tmp_path, "tracking.experiment=never-opened")
    with open_run(config, lm=tiny_lm, embedder=embedder) as session:
        assert session.run_id is None and session.layer() == 2
        assert [c.synset for c in session.graph.concepts] == list(session.graph.synsets)
    assert tracking.client().get_experiment_by_name("never-opened") is None


def test_overrides_without_a_run_to_resume_are_refused(tmp_path, mlflow_store, tiny_lm):
    with pytest.raises(RunError, match="overrides apply to a resume"):
        run_phase5(tiny_config(tmp_path), overrides=["gate.perplexity_multiple=5"], lm=tiny_lm)
