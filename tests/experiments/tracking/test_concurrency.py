"""Several runs starting at once on one store, and lookups that must not create a store.

On a new sqlite store every first run used to race in MLflow's schema migrations: of four
processes starting together three died ("duplicate column name", "expected to match one
row"). The schema is now created once under a lock file; a tracking server (``make
mlflow-server``) is the documented path for many writers and is tested the same way.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

WRITER = """
import sys, time
from experiments import tracking
start = float(sys.argv[1])
while time.time() < start:  # every process opens the store at the same moment
    time.sleep(0.001)
run_id = tracking.start_run("concurrent", f"writer {sys.argv[2]}", tags={"phase": "5"})
tracking.log_params(run_id, {"writer": sys.argv[2]})
tracking.log_metrics(run_id, {"x": float(sys.argv[2])})
tracking.end_run(run_id)
print("finished", run_id)
"""


def start_writers(
    n: int, env: dict[str, str], delay: float = 8.0
) -> list[subprocess.CompletedProcess]:
    """``n`` processes that each run a whole tracked run, released at one instant (after
    ``delay`` s, enough for every interpreter to import MLflow first)."""
    start = time.time() + delay
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(start), str(i)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(n)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return results


def finished_runs(uri: str) -> list:
    from mlflow.tracking import MlflowClient

    c = MlflowClient(uri)
    exp = c.get_experiment_by_name("concurrent")
    return [r for r in c.search_runs([exp.experiment_id]) if r.info.status == "FINISHED"]


def test_four_first_runs_on_a_new_sqlite_store_all_finish(tmp_path):
    uri = f"sqlite:///{tmp_path / 'new' / 'mlruns.db'}"
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri}
    env.pop("MLFLOW_ARTIFACT_ROOT", None)
    results = start_writers(4, env)
    failed = [r.stderr.strip().splitlines()[-1:] for r in results if r.returncode != 0]
    assert not failed, f"{len(failed)} of 4 runs died: {failed}"
    assert len(finished_runs(uri)) == 4


def test_four_runs_against_a_tracking_server_all_finish(mlflow_server):
    uri, _root = mlflow_server
    results = start_writers(4, {**os.environ, "MLFLOW_TRACKING_URI": uri})
    failed = [r.stderr.strip().splitlines()[-1:] for r in results if r.returncode != 0]
    assert not failed, f"{len(failed)} of 4 runs died: {failed}"
    assert len(finished_runs(uri)) == 4


def test_looking_up_a_run_in_a_missing_store_creates_nothing(tmp_path, monkeypatch):
    from experiments import tracking

    db = tmp_path / "nowhere" / "mlruns.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    with pytest.raises(tracking.StoreNotFound, match="no MLflow store at"):
        tracking.get_run("0123456789abcdef")
    with pytest.raises(tracking.StoreNotFound):
        tracking.latest_parent_run("phase5-semantic-steering")
    assert not db.exists()
    assert not db.parent.exists()


def test_artefacts_land_beside_the_store_whatever_the_working_directory(tmp_path, monkeypatch):
    from experiments import tracking

    store = tmp_path / "store"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{store / 'mlruns.db'}")
    monkeypatch.delenv("MLFLOW_ARTIFACT_ROOT", raising=False)
    assert tracking.artifact_root() == (store / "mlartifacts").resolve()
    exp_id = tracking.experiment_id("beside-the-store")
    location = tracking.client().get_experiment(exp_id).artifact_location
    assert location == (store / "mlartifacts" / "beside-the-store").as_uri()
    assert not (elsewhere / "mlartifacts").exists()
