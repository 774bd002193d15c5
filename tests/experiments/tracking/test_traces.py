"""experiments.tracking.traces into a local sqlite store: written synchronously, complete."""

from __future__ import annotations

import os

import pytest

from experiments import tracking
from experiments.tracking.traces import (
    ASYNC_ENV,
    CODE_SOURCE_ID,
    KEY_TAG,
    Feedback,
    GenerationTrace,
    log_generation_traces,
    read_map,
    traces_of_run,
)


@pytest.mark.parametrize(
    ("uri", "local"),
    [
        ("sqlite:///mlruns.db", True),
        ("file:///tmp/mlruns", True),
        ("mlruns", True),
        ("http://127.0.0.1:5000", False),
        ("https://mlflow.example.org", False),
        ("databricks://profile", False),
    ],
)
def test_local_store_kinds(uri, local):
    assert tracking.is_local_store(uri) is local


def _items(n: int) -> list[GenerationTrace]:
    return [
        GenerationTrace(
            key=f"dog.n.01|p{i}|n0|s+1.000",
            inputs={"concept": "dog.n.01", "prompt": "Tell me about dogs.", "seed": i},
            text=f"text {i}",
            tags={"concept": "dog.n.01", "strength": "+1"},
            feedback=[
                Feedback("delta", 0.1 * i, rationale="Δ", metadata={"core_sim": 0.5}),
                Feedback("coherence", None, error="no perplexity"),
            ],
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("user_setting", [None, "true"])
def test_traces_land_in_a_sqlite_store_with_their_feedback(
    mlflow_store, tmp_path, monkeypatch, user_setting
):
    """The local store is written synchronously unless the user set the exporter's mode;
    either way every trace and its code feedback is there when the call returns, and the
    environment is as it was."""
    if user_setting is None:
        monkeypatch.delenv(ASYNC_ENV, raising=False)
    else:
        monkeypatch.setenv(ASYNC_ENV, user_setting)
    experiment = tracking.experiment_id(f"traces-test-{user_setting}")
    run_id = tracking.start_run(f"traces-test-{user_setting}", "traces")
    map_file = tmp_path / "traces.json"
    mapping = log_generation_traces(experiment, run_id, _items(3), map_file)
    assert os.environ.get(ASYNC_ENV) == user_setting
    assert read_map(map_file) == mapping and len(mapping) == 3
    traces = traces_of_run(experiment, run_id)
    assert {t.info.tags[KEY_TAG] for t in traces} == set(mapping)
    for trace in traces:
        by_name = {a.name: a for a in trace.info.assessments}
        assert by_name["delta"].source.source_id == CODE_SOURCE_ID
        assert by_name["coherence"].feedback.error is not None  # an abstention, not a 0
    # a second call logs nothing new
    assert log_generation_traces(experiment, run_id, _items(3), map_file) == mapping
    assert len(traces_of_run(experiment, run_id)) == 3
