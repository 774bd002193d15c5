"""``steer-eval human`` and ``steer-eval panel``: options, choices and --run latest."""

from __future__ import annotations

import uuid

from typer.testing import CliRunner

from experiments import tracking
from experiments.cli import app

runner = CliRunner()


def test_human_and_panel_help():
    out = runner.invoke(app, ["human", "--help"])
    assert out.exit_code == 0
    for command in ("export", "rate", "import"):
        assert command in out.output
    out = runner.invoke(app, ["panel", "--help"])
    assert out.exit_code == 0 and "auto" in out.output and "always" in out.output


def test_panel_when_is_a_checked_choice(mlflow_store):
    out = runner.invoke(app, ["panel", "--run", "0" * 32, "--when", "sometimes"])
    assert out.exit_code == 2 and "sometimes" in out.output
    assert "Traceback" not in out.output


def test_run_latest_uses_the_configs_experiment(mlflow_store, tmp_path):
    experiment = f"cli-latest-{uuid.uuid4().hex[:8]}"
    run_id = tracking.start_run(experiment, "parent", tags={"phase": "5"})
    tracking.end_run(run_id)
    config = tmp_path / "c.yaml"
    config.write_text(f"tracking:\n  experiment: {experiment}\n  results_dir: {tmp_path / 'res'}\n")
    # The newest run of the config's experiment is found (it has no generations).
    out = runner.invoke(app, ["human", "export", "--run", "latest", "--config", str(config)])
    assert out.exit_code == 2 and run_id in out.output and "generations" in out.output
    out = runner.invoke(
        app, ["panel", "--run", "latest", "--experiment", f"{experiment}-none", "--when", "always"]
    )
    assert out.exit_code == 2 and "no finished Phase 5 run" in out.output
