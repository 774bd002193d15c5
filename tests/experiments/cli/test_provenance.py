"""Provenance that survives a rescore or a move (issue 64, item 4).

A rescore keeps the run's own command and ``config.yaml`` (its config beside it, in
``config.rescored.yaml``, its command in ``steer_eval.rescore_command``) and ``runs``,
the runs table's ``rescored with`` column and ``answer.md`` say which settings it changed;
``runs --json`` carries each run's model, layer, β, vector source and seed. A project
copied to another folder (store, artefacts and results) writes and reads inside itself
only: the original is moved out of the way before the copy is used, so a path into it
could be neither read nor written without the test seeing it. Tiny random Gemma, real
MLflow stores.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from experiments import tracking
from experiments.cli import app
from experiments.config import load_config
from experiments.phase5.run import run_phase5
from experiments.rundir import RESCORED_TAG, RUN_DIR_TAG, RunDir
from experiments.tracking.context import (
    COMMAND_TAG,
    REOPEN_COMMAND_TAG,
    RESCORE_COMMAND_TAG,
    SOURCE_NAME,
    reopen_tags,
)
from experiments.tracking.store import location_path

REPO = Path(__file__).resolve().parents[3]
runner = CliRunner()
EXPERIMENT = "provenance-cli"
ORIGINAL_COMMAND = "steer-eval run --concepts 2"
CHANGE = "gate.perplexity_multiple=10.0 (was 20.0)"


def tiny_config(experiment: str, root: Path | None = None):
    """configs/phase5.yaml made tiny; its folders under ``root``, or relative (a project
    run from its own folder) when None."""
    where = []
    if root is not None:
        where = [f"classifier.dir={root / 'cls'}", f"tracking.results_dir={root / 'res'}"]
    return load_config(
        REPO / "configs" / "phase5.yaml",
        [
            f"concepts.file={REPO / 'data' / 'concepts' / 'wordnet_top10.json'}",
            "concepts.limit=2",
            "generation.max_new_tokens=6",
            "generation.batch_size=16",
            "layer=2",
            "controls.random_directions=1",
            "criteria.n_boot=100",
            f"tracking.experiment={experiment}",
            *where,
        ],
    )


def _said(out) -> str:
    return " ".join((out.stdout + out.stderr).split())


@pytest.fixture(scope="module")
def run(tmp_path_factory, mlflow_store, tiny_lm, embedder, single_threaded):
    root = tmp_path_factory.mktemp("provenance")
    with single_threaded():
        result = run_phase5(tiny_config(EXPERIMENT, root), lm=tiny_lm, embedder=embedder)
    tracking.client().set_tag(result.run_id, COMMAND_TAG, ORIGINAL_COMMAND)  # as the CLI does
    return result, RunDir(result.results_dir.parent, result.run_id)


def _rescore(run_id: str, *sets: str) -> dict:
    args = ["rescore", run_id, *(a for s in sets for a in ("--set", s)), "--json"]
    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


def _artefact(run_id: str, name: str) -> str:
    return Path(tracking.client().download_artifacts(run_id, name)).read_text()


def _listed(run_id: str) -> dict:
    out = runner.invoke(app, ["runs", "-e", EXPERIMENT, "--json"])
    assert out.exit_code == 0, out.output
    return next(r for r in json.loads(out.stdout)["runs"] if r["run_id"] == run_id)


def test_a_rescore_keeps_the_runs_command_and_config_and_says_what_it_changed(run):
    result, folder = run
    own = folder.file(RunDir.CONFIG).read_bytes()
    params = tracking.get_run(result.run_id).data.params
    data = _rescore(result.run_id, "gate.perplexity_multiple=10")
    note = data["answer"]["notes"][0]
    assert note.startswith(f"Rescored with {CHANGE}: the scores and verdicts come from")
    assert folder.file(RunDir.CONFIG).read_bytes() == own  # the run's own, untouched
    rescored = load_config(folder.file(RunDir.RESCORED_CONFIG))
    assert rescored.gate.perplexity_multiple == 10
    assert folder.read_record().config.gate.perplexity_multiple == 10  # what it scored by
    run_now = tracking.get_run(result.run_id)
    tags = run_now.data.tags
    assert tags[COMMAND_TAG] == ORIGINAL_COMMAND
    assert tags[RESCORE_COMMAND_TAG] == (
        f"rescore({result.run_id!r}, overrides=['gate.perplexity_multiple=10'])"
    )  # a CliRunner call is no command line: the call it made
    assert tags[RESCORED_TAG] == CHANGE  # the runs table's column
    assert run_now.data.params == params  # MLflow's parameters: the run's own settings
    assert params["config.gate.perplexity_multiple"] == "20.0"
    assert note in folder.file(RunDir.ANSWER).read_text()
    assert note in _artefact(result.run_id, RunDir.ANSWER)  # MLflow's copy of the answer
    assert "perplexity_multiple: 10" in _artefact(result.run_id, RunDir.RESCORED_CONFIG)
    assert _listed(result.run_id)["rescored_with"] == CHANGE
    out = runner.invoke(app, ["runs", "-e", EXPERIMENT])
    assert f"rescored with {CHANGE}" in _said(out)


def test_a_rescore_goes_on_from_the_last_and_one_back_to_the_runs_settings_says_none(run):
    result, folder = run
    own = folder.file(RunDir.CONFIG).read_bytes()
    _rescore(result.run_id, "gate.perplexity_multiple=10")
    again = _rescore(result.run_id)  # no --set: the earlier rescore's settings hold
    assert again["answer"]["notes"][0].startswith(f"Rescored with {CHANGE}")
    assert tracking.get_run(result.run_id).data.tags[RESCORED_TAG] == CHANGE
    back = _rescore(result.run_id, "gate.perplexity_multiple=20")
    assert not any("Rescored" in n for n in back["answer"]["notes"])
    assert not folder.file(RunDir.RESCORED_CONFIG).exists()
    assert RESCORED_TAG not in tracking.get_run(result.run_id).data.tags
    assert "Rescored" not in folder.file(RunDir.ANSWER).read_text()
    assert _listed(result.run_id)["rescored_with"] == ""
    assert folder.file(RunDir.CONFIG).read_bytes() == own


def test_a_reopened_run_keeps_the_command_that_made_it():
    rescore = reopen_tags(["/venv/bin/steer-eval", "rescore", "abc", "--set", "gate.x=1"])
    assert COMMAND_TAG not in rescore and SOURCE_NAME not in rescore
    assert rescore[RESCORE_COMMAND_TAG] == "steer-eval rescore abc --set gate.x=1"
    resume = reopen_tags(["/venv/bin/steer-eval", "run", "--resume", "abc"])
    assert resume[REOPEN_COMMAND_TAG] == "steer-eval run --resume abc"
    assert RESCORE_COMMAND_TAG not in resume


def test_runs_json_carries_model_layer_beta_vector_source_and_seed(run):
    result, _folder = run
    record = result.record
    assert _listed(result.run_id)["settings"] == {
        "model": record.model_id,
        "layer": record.layer,
        "beta": record.config.steering.beta,
        "vector_source": record.config.steering.vector_source,
        "vector_file": None,
        "seed": record.config.seed,
    }


def test_a_folder_that_is_not_here_is_found_again_under_results(
    mlflow_store, tmp_path, monkeypatch, caplog
):
    """A run whose tagged folder is not on this machine (another machine's path, a
    server's store) reads its folder from ./results/ and says which it read."""
    run_id = tracking.start_run("found-again", "r", tags={"phase": "5"})
    tracking.end_run(run_id)
    tracking.client().set_tag(run_id, RUN_DIR_TAG, f"/elsewhere/results/phase5/{run_id}")
    (tmp_path / "results" / "phase5" / run_id).mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    folder = RunDir.locate(tracking.get_run(run_id))
    assert folder.path.resolve() == (tmp_path / "results" / "phase5" / run_id).resolve()
    said = " ".join(caplog.text.split())
    assert f"its folder /elsewhere/results/phase5/{run_id} is not on this machine" in said
    assert f"reading results/phase5/{run_id}" in said


def _paths_in(db: Path) -> list[Path]:
    """Every local path the store keeps: artefact locations and run folders."""
    with sqlite3.connect(db) as con:
        rows = [
            *con.execute("SELECT artifact_location FROM experiments"),
            *con.execute("SELECT artifact_uri FROM runs"),
            *con.execute("SELECT value FROM tags WHERE key = ?", (RUN_DIR_TAG,)),
            *con.execute("SELECT value FROM trace_tags WHERE key = 'mlflow.artifactLocation'"),
        ]
    return [p for (value,) in rows if (p := location_path(value)) is not None]


def _files(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*")}


def test_a_copied_project_writes_and_reads_inside_itself(
    tmp_path, monkeypatch, mlflow_store, tiny_lm, embedder, single_threaded
):
    """A project (store, artefacts, results, classifiers) with a finished run is copied;
    the original is moved away, so any path into it leads nowhere. In the copy, the
    default store (sqlite:///mlruns.db, from a fresh process) says it was moved and
    lists the run with nothing outside; a rescore, ``samples`` and a new run read and
    write the copy only, and nothing appears at the original's path."""
    original, copy = tmp_path / "project", tmp_path / "copy"
    original.mkdir()
    monkeypatch.chdir(original)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{original / 'mlruns.db'}")
    monkeypatch.setenv("MLFLOW_ARTIFACT_ROOT", str(original / "mlartifacts"))
    config = tiny_config("copied-project")  # results and classifiers under ./results
    with single_threaded():
        first = run_phase5(config, lm=tiny_lm, embedder=embedder)
    assert first.results_dir.resolve().is_relative_to(original.resolve())
    shutil.copytree(original, copy)
    away = original.rename(tmp_path / "away")  # the original, where no path leads
    kept = _files(away)

    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    listed = subprocess.run(
        [sys.executable, "-m", "experiments", "runs", "--json"],
        cwd=copy, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    said = " ".join(listed.stderr.split())
    assert f"made in {original.resolve()} and is now in {copy.resolve()}" in said
    data = json.loads(listed.stdout)
    assert data["store_warnings"] == [] and first.run_id in {r["run_id"] for r in data["runs"]}

    there = json.loads(_in_a_new_process(copy, env, first.run_id))  # the work, in the copy
    assert there["rescore"]["run_dir"] == str((copy / "results/phase5" / first.run_id).resolve())
    assert Path(there["samples"]["folder"]).resolve().is_relative_to(copy.resolve())
    second = there["second"]

    assert not original.exists()  # nothing was written where the original was
    assert _files(away) == kept
    paths = _paths_in(copy / "mlruns.db")
    assert paths and all(p.is_relative_to(copy.resolve()) for p in paths), paths
    with sqlite3.connect(copy / "mlruns.db") as con:
        uris = dict(con.execute("SELECT run_uuid, artifact_uri FROM runs"))
    for run_id in (first.run_id, second["run_id"]):
        artefacts = location_path(uris[run_id])
        assert artefacts is not None and artefacts.is_relative_to(copy.resolve())
        assert (artefacts / RunDir.ANSWER).exists()
    assert "Rescored with" in (location_path(uris[first.run_id]) / RunDir.ANSWER).read_text()
    folder = copy / "results" / "phase5" / second["run_id"]
    assert Path(second["results_dir"]).resolve() == folder.resolve()
    assert (folder / RunDir.RECORD).exists()


# What the copy's user does next, in a process of its own (MLflow keeps a run's artefact
# store per process: a test process that made the run would still hold the original's).
WORK_IN_THE_COPY = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("tests_conftest", sys.argv[2])
conftest = importlib.util.module_from_spec(spec)
spec.loader.exec_module(conftest)
from typer.testing import CliRunner
from experiments.cli import app
from experiments.phase5.run import run_phase5
from steering.models import wrap_model
from test_provenance import tiny_config

run_id, said = sys.argv[1], {}
for name, args in (
    ("rescore", ["rescore", run_id, "--set", "gate.perplexity_multiple=10", "--json"]),
    ("samples", ["samples", run_id, "--json"]),
):
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    said[name] = json.loads(out.stdout)
lm = wrap_model(conftest.build_tiny_gemma(), conftest.build_tiny_tokenizer(), "tiny-random-gemma3")
second = run_phase5(tiny_config("copied-project"), lm=lm)
said["second"] = {"run_id": second.run_id, "results_dir": str(second.results_dir.resolve())}
print(json.dumps(said))
"""


def _in_a_new_process(cwd: Path, env: dict[str, str], run_id: str) -> str:
    conftest = Path(__file__).resolve().parents[2] / "conftest.py"
    done = subprocess.run(
        [sys.executable, "-c", WORK_IN_THE_COPY, run_id, str(conftest)],
        cwd=cwd, env={**env, "PYTHONPATH": str(Path(__file__).parent)}, capture_output=True,
        text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]
