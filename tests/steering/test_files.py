"""Atomic writes give their files the mode a plain open() would (0666 less the umask),
not mkstemp's 0600: the run folder's files, the judge cache's entries and MLflow's
copies of them are readable by whoever the umask lets read them."""

from __future__ import annotations

import os
import stat

import pytest

from experiments.rundir import RunDir, atomic_write_text
from judges.cache import JudgeCache
from steering import files


@pytest.fixture
def umask_of():
    """``umask_of(0o022)``: set the process umask for the test (restored after)."""
    old = os.umask(0o022)
    os.umask(old)

    def set_(mask: int) -> None:
        os.umask(mask)
        files.forget_umask()

    yield set_
    os.umask(old)
    files.forget_umask()


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize(("mask", "expected"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_an_atomic_write_has_the_mode_open_gives(tmp_path, umask_of, mask, expected):
    umask_of(mask)
    assert files.umask() == mask and files.file_mode() == expected
    atomic_write_text(tmp_path / "answer.md", "# answer\n")
    with open(tmp_path / "plain.txt", "w") as handle:  # what it should match
        handle.write("x")
    assert mode(tmp_path / "answer.md") == mode(tmp_path / "plain.txt") == expected
    assert (tmp_path / "answer.md").read_text() == "# answer\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_run_folders_files_and_the_judge_cache_are_readable_by_others(tmp_path, umask_of):
    umask_of(0o022)
    run_dir = RunDir(tmp_path / "results", "abc")
    run_dir.write_scores([{"key": "k", "delta": 0.5}])
    atomic_write_text(run_dir.file(RunDir.CRITERIA), "criterion,value\n")
    cache = JudgeCache(tmp_path / "cache")
    cache.put("f" * 64, {"score": 3})
    (entry,) = (tmp_path / "cache").rglob("*.json")
    for path in (run_dir.file(RunDir.SCORES), run_dir.file(RunDir.CRITERIA), entry):
        assert mode(path) == 0o644, path


def test_an_artefact_logged_to_mlflow_keeps_the_readable_mode(tmp_path, umask_of, mlflow_store):
    import mlflow

    from experiments import tracking

    umask_of(0o022)
    path = tmp_path / "summary.md"
    atomic_write_text(path, "summary\n")
    with mlflow.start_run(experiment_id=tracking.experiment_id("file-modes")) as run:
        mlflow.log_artifact(str(path))
    (copy,) = (mlflow_store / "mlartifacts").rglob(f"{run.info.run_id}/**/summary.md")
    assert mode(copy) == 0o644 and copy.read_text() == "summary\n"
