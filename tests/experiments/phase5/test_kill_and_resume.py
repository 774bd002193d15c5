"""Killed in any stage, resumed, the run equals an uninterrupted one: files and MLflow.

For each stage a child process runs Phase 5 on the tiny random Gemma and is SIGKILLed
there (``kill_harness.py`` says where and how); this process then resumes the run with
``run_phase5(resume=...)``. The run folder and the MLflow state (the parent's status,
parameters, metrics, tags and artefacts; every child run; one trace per generation with
its code feedback) must equal those of an uninterrupted run of the same config in its own
store, once wall times and run ids are set aside.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from experiments import tracking
from experiments.config import dump_config, load_config
from experiments.phase5.run import run_phase5
from experiments.rundir import RunDir, plan_order
from experiments.tracking.context import REOPENED_TAG
from experiments.tracking.traces import KEY_TAG, traces_of_run

pytestmark = pytest.mark.integration

HARNESS = Path(__file__).with_name("kill_harness.py")
STAGES = ("generation", "scoring", "child_runs", "traces", "publish", "evaluation")
# What differs between two runs of one config by design: wall times, speeds and ids.
TIMING_METRICS = ("time/", "generation/", "traces/seconds", "rescore/")
RECORD_VARIES = ("run_id", "timings", "tokens_per_second", "classifier_run_id")
TAGS_VARY = (
    "mlflow.note.content",  # links the Phase 4 run, which lives in the reference's store
    "mlflow.parentRunId",
    "steer_eval.run_dir",
    "steer_eval.phase4_run",
    "steer_eval.load",  # the machine's load average when the run started
    # the checkout at logging time: a resume may run from an edited or newer checkout
    "git_dirty",
    "git_commit",
    # set on the resumed run only: its timings miss what ran before the kill (asserted)
    REOPENED_TAG,
)


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_lm, embedder):
    """The config (its classifiers trained once, by the reference) and the reference run."""
    tmp = tmp_path_factory.mktemp("kill")
    config = load_config(
        "configs/phase5.yaml",
        [
            "concepts.limit=3",
            "generation.max_new_tokens=6",
            "generation.batch_size=8",
            "layer=2",
            "criteria.n_boot=200",
            f"classifier.dir={tmp / 'classifiers'}",
            f"tracking.results_dir={tmp / 'results'}",
        ],
    )
    path = tmp / "config.yaml"
    path.write_text(dump_config(config))
    with store(tmp / "reference"):
        reference = run_phase5(config, lm=tiny_lm, embedder=embedder)
        expected = snapshot(reference.run_id, config)
    return tmp, path, config, expected


class store:
    """MLFLOW_TRACKING_URI pointed at a fresh sqlite store for the block."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.uri = f"sqlite:///{folder / 'mlruns.db'}"
        self.artifacts = str(folder / "mlartifacts")

    def __enter__(self) -> store:
        self.saved = {k: os.environ.get(k) for k in ("MLFLOW_TRACKING_URI", "MLFLOW_ARTIFACT_ROOT")}
        os.environ["MLFLOW_TRACKING_URI"] = self.uri
        os.environ["MLFLOW_ARTIFACT_ROOT"] = self.artifacts
        return self

    def __exit__(self, *_exc: object) -> None:
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# a batch's speed and its wall-clock times (the traces' span times) differ between runs
GENERATION_VARIES = {"batch_tokens_per_second", "started_ns", "ended_ns"}


def snapshot(run_id: str, config) -> dict:
    """Everything a finished run leaves behind, with what varies by design taken out."""
    run_dir = RunDir.locate(tracking.get_run(run_id))
    files = sorted(p.name for p in run_dir.path.iterdir())
    generations = [
        {k: v for k, v in g.items() if k not in GENERATION_VARIES}
        for g in run_dir.read_generations()
    ]
    record = json.loads(run_dir.file(RunDir.RECORD).read_text())
    summary = run_dir.file(RunDir.SUMMARY).read_text().splitlines()
    folder = {
        "files": files,
        "generations": generations,
        "generations_in_plan_order": generations == plan_order(generations),
        "scores": run_dir.read_scores(),
        "criteria.csv": run_dir.file(RunDir.CRITERIA).read_text(),
        "record": {k: v for k, v in record.items() if k not in RECORD_VARIES},
        "summary": [line for line in summary[1:] if not line.startswith("- generation:")],
        "centroids": run_dir.file(RunDir.CENTROIDS).read_text(),
        "config": run_dir.file(RunDir.CONFIG).read_text(),
        "traced_keys": sorted(json.loads(run_dir.file(RunDir.TRACES).read_text())),
        "figures": {
            name: run_dir.file(name).read_bytes() for name in files if name.endswith(".png")
        },
    }
    return {"folder": folder, "mlflow": mlflow_state(run_id, config)}


def run_state(run) -> dict:
    c = tracking.client()
    return {
        "status": run.info.status,
        "params": dict(run.data.params),
        "metrics": {k: v for k, v in run.data.metrics.items() if not k.startswith(TIMING_METRICS)},
        "tags": {
            k: v
            for k, v in run.data.tags.items()
            if k not in TAGS_VARY and not k.startswith("mlflow.source")
        },
        "artifacts": sorted(f.path for f in c.list_artifacts(run.info.run_id)),
    }


def mlflow_state(run_id: str, config) -> dict:
    parent = tracking.get_run(run_id)
    children = tracking.child_runs(run_id, config.tracking.experiment)
    traces = traces_of_run(parent.info.experiment_id, run_id)
    per_key: dict[str, list] = {}
    for trace in traces:
        feedback = sorted(
            (a.name, json.dumps(a.feedback.value))
            for a in trace.info.assessments or []
            if a.valid is not False and a.feedback is not None
        )
        per_key.setdefault(trace.info.tags[KEY_TAG], []).append(feedback)
    return {
        "parent": run_state(parent),
        # per-cell children by their cell, the GenAI evaluation child by its name
        "children": {r.data.tags.get("cell", r.info.run_name): run_state(r) for r in children},
        "n_children": len(children),
        "n_traces": len(traces),
        "traces": per_key,
    }


def differences(got: dict, expected: dict, prefix: str = "") -> list[str]:
    """Dotted paths where two snapshots differ (for a readable failure)."""
    if isinstance(got, dict) and isinstance(expected, dict):
        out = []
        for key in sorted(set(got) | set(expected), key=str):
            if key not in got or key not in expected:
                out.append(f"{prefix}{key}: only in {'expected' if key in expected else 'got'}")
            else:
                out += differences(got[key], expected[key], f"{prefix}{key}.")
        return out
    return [] if got == expected else [prefix.rstrip(".")]


@pytest.mark.parametrize("stage", STAGES)
def test_a_run_killed_in_a_stage_resumes_to_the_uninterrupted_run(
    stage, setup, tiny_lm, embedder, tmp_path
):
    _, config_path, config, expected = setup
    with store(tmp_path / "store") as killed_store:
        env = {**os.environ, "MLFLOW_TRACKING_URI": killed_store.uri}
        done = subprocess.run(
            [sys.executable, str(HARNESS), stage, str(config_path), str(torch.get_num_threads())],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == -9, f"the child was not killed in {stage}: {done.stderr[-2000:]}"
        killed = tracking.latest_parent_run(config.tracking.experiment, finished=False)
        assert tracking.get_run(killed).info.status == "RUNNING"  # SIGKILL: nobody closed it
        resumed = run_phase5(resume=killed, lm=tiny_lm, embedder=embedder)
        assert resumed.run_id == killed
        assert tracking.get_run(killed).data.tags[REOPENED_TAG] == "true"
        got = snapshot(killed, config)
    folder = differences(got["folder"], expected["folder"])
    state = differences(got["mlflow"], expected["mlflow"])
    print(f"\n| {stage} | artefacts identical: {not folder} | MLflow identical: {not state} |")
    assert not folder, f"run folder differs after a kill in {stage}: {folder[:10]}"
    assert not state, f"MLflow state differs after a kill in {stage}: {state[:10]}"


def test_set_on_a_resume_changes_scoring_only(setup, tiny_lm, embedder, tmp_path):
    """What is generated is fixed by the run: such an override is refused by name before
    anything loads, and a scoring override is applied and written to the run's config."""
    from experiments.config import ConfigError

    _, config_path, config, _ = setup
    with store(tmp_path / "store") as killed_store:
        env = {**os.environ, "MLFLOW_TRACKING_URI": killed_store.uri}
        subprocess.run(
            [sys.executable, str(HARNESS), "generation", str(config_path), "1"],
            env=env,
            capture_output=True,
            timeout=600,
            check=False,
        )
        killed = tracking.latest_parent_run(config.tracking.experiment, finished=False)
        run_dir = RunDir.locate(tracking.get_run(killed))
        before = run_dir.file(RunDir.CONFIG).read_text()
        with pytest.raises(ConfigError, match=r"resume cannot change generation.max_new_tokens"):
            run_phase5(resume=killed, overrides=["generation.max_new_tokens=5"])
        assert run_dir.file(RunDir.CONFIG).read_text() == before
        resumed = run_phase5(
            resume=killed,
            lm=tiny_lm,
            embedder=embedder,
            overrides=["gate.perplexity_multiple=10"],
        )
        assert resumed.record.config.gate.perplexity_multiple == 10
        assert "perplexity_multiple: 10" in run_dir.file(RunDir.CONFIG).read_text()
        assert tracking.get_run(killed).info.status == "FINISHED"
