"""``steer-eval export <run> [--out <folder>]``: the run comes first, as in ``rescore``,
and anything that is not a run is refused with exit 2 and the form that works, never
taken for ``latest`` (the old ``export <folder> --run <run>`` exported the newest run
into a folder named after the id it was given). The export itself, on a real run, is
``tests/experiments/phase5/test_vector_roundtrip.py``."""

from __future__ import annotations

from typer.testing import CliRunner

from experiments import tracking
from experiments.cli import app
from experiments.rundir import RUN_DIR_TAG

runner = CliRunner()


def _said(out) -> str:
    return " ".join((out.stdout + out.stderr).split())


def _run_without_record(tmp_path, name: str) -> str:
    """A finished Phase 5 parent run whose folder holds no record yet."""
    tags = {"phase": "5", RUN_DIR_TAG: str(tmp_path / "results" / name)}
    run_id = tracking.start_run("export-cli", name, tags=tags)
    tracking.end_run(run_id)
    (tmp_path / "results" / run_id).mkdir(parents=True)  # where the tag's parent holds it
    return run_id


def test_the_run_named_first_is_the_one_exported_not_the_latest(mlflow_store, tmp_path):
    older = _run_without_record(tmp_path, "older")
    _run_without_record(tmp_path, "newer")  # latest
    out = runner.invoke(app, ["export", older, "--out", str(tmp_path / "out")])
    assert out.exit_code == 2
    assert f"run {older} has no record yet" in _said(out)
    assert not (tmp_path / "out").exists()


def test_something_that_is_no_run_is_refused_with_the_form(mlflow_store, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = runner.invoke(app, ["export", "vectors"])
    assert out.exit_code == 2
    text = _said(out)
    assert "'vectors' is neither a run nor `latest`" in text
    assert "`steer-eval export <run id>|latest --out <folder>`" in text
    assert not (tmp_path / "vectors").exists() and not (tmp_path / "exports").exists()


def test_the_old_form_with_an_existing_folder_is_told_the_new_one(mlflow_store, tmp_path):
    folder = tmp_path / "vectors"
    folder.mkdir()
    out = runner.invoke(app, ["export", str(folder)])
    assert out.exit_code == 2
    assert "is a folder, not a run" in _said(out)
    assert f"`steer-eval export <run id> --out {folder}`" in _said(out)
    run_id = _run_without_record(tmp_path, "asked")
    out = runner.invoke(app, ["export", str(folder), "--run", run_id])
    assert out.exit_code == 2
    assert f"`steer-eval export {run_id} --out {folder}`" in _said(out)
    out = runner.invoke(app, ["export", "--run", run_id])
    assert out.exit_code == 2
    assert f"`steer-eval export {run_id} --out <folder>`" in _said(out)
    assert list(folder.iterdir()) == []


def test_help_shows_the_run_first_and_the_folder_by_out():
    out = runner.invoke(app, ["export", "--help"])
    assert out.exit_code == 0
    text = _said(out)
    assert "--out" in text and "exports/<run id>" in text and "--run" not in text
