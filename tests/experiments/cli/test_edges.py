"""The command line's edges: help that fits the width, a busy port, `run --dry-run`, a
missing model directory."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from experiments import tracking
from experiments.cli import app

REPO = Path(__file__).resolve().parents[3]
runner = CliRunner()

EVERY_HELP = """
import sys
from experiments.cli import app
import typer

group = typer.main.get_command(app)
names = []
for name, command in group.commands.items():
    subs = getattr(command, "commands", None)
    names += [[name, sub] for sub in subs] if subs else [[name]]
for argv in [[]] + names:
    print("=== " + " ".join(argv))
    try:
        app([*argv, "--help"])
    except SystemExit:
        pass
"""


def every_help(columns: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TERMINAL_WIDTH")}
    if columns is not None:
        env["COLUMNS"] = columns
    out = subprocess.run(
        [sys.executable, "-c", EVERY_HELP],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    return out.stdout


@pytest.mark.parametrize("columns", ["120", None])
def test_no_option_help_is_cut_and_lines_fit_the_width(columns):
    """At COLUMNS=120, and with no terminal and no COLUMNS (piped: 120 too, not 80)."""
    text = every_help(columns)
    assert text.count("=== ") >= 10
    assert "…" not in text, [line for line in text.splitlines() if "…" in line]
    widths = [len(line) for line in text.splitlines()]
    assert max(widths) <= 120
    assert max(widths) > 100  # wider than the 80 columns rich falls back to


def test_a_busy_port_names_the_flag_and_the_make_variable(mlflow_store):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = runner.invoke(app, ["ui", "--port", str(port)])
    assert out.exit_code == 2
    message = " ".join(out.stderr.split())
    assert f"port {port} on 127.0.0.1 is in use" in message
    assert f"make ui PORT={port + 1}" in message and f"--port {port + 1}" in message


def test_make_ui_passes_its_port():
    out = subprocess.run(
        ["make", "-n", "ui", "PORT=5055"], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert "ui --host 127.0.0.1 --port 5055" in out.stdout


def test_dry_run_prints_the_plan_and_a_time_from_the_last_run_here(mlflow_store):
    experiment = "dry-run-test"
    run_id = tracking.start_run(experiment, "earlier run", tags={"phase": "5"})
    tracking.log_metrics(
        run_id,
        {
            "generation/tokens_per_second": 24.0,
            "time/generation": 99.0,  # estimated from the tokens instead
            "time/classifiers": 50.0,  # once per probe set: not in the estimate
            "time/perplexity": 4.0,
            "time/child_runs": 2.5,
        },
    )
    tracking.end_run(run_id)
    args = ["run", "--dry-run", "--concepts", "3", "--max-new-tokens", "8"]
    args += ["--set", f"tracking.experiment={experiment}"]
    out = runner.invoke(app, [*args, "--json"])
    assert out.exit_code == 0, out.stderr
    plan = json.loads(out.stdout)
    # 3 concepts × 3 prompts × (unsteered + 2 concept + 2 random-direction rows)
    assert plan["n_rows"] == 45 and plan["max_tokens"] == 45 * 8
    assert plan["rows"]["report: random directions (null)"] == 18
    assert plan["speed_from"] == {
        "run_id": run_id,
        "run_name": "earlier run",
        "match": "this machine",
    }
    assert plan["estimated_seconds"] == pytest.approx(45 * 8 / 24.0)
    assert plan["estimated_other_stages_seconds"] == {"child_runs": 2.5, "perplexity": 4.0}
    assert plan["estimated_total_seconds"] == pytest.approx(45 * 8 / 24.0 + 6.5)
    text = runner.invoke(app, args)
    assert text.exit_code == 0
    said = " ".join(text.stdout.split())
    assert "at most 360 new tokens (45 rows × 8)" in said and "about 0.2 min at 24.0" in said
    assert "every stage: about 0.4 min" in said and "perplexity 4 s" in said
    # nothing ran: still only the earlier run in the experiment
    exp = tracking.client().get_experiment_by_name(experiment)
    assert len(tracking.client().search_runs([exp.experiment_id])) == 1


def test_results_dir_places_a_new_run_and_the_plan_says_where(mlflow_store, tmp_path):
    folder = tmp_path / "elsewhere"
    args = ["run", "--dry-run", "--concepts", "2", "--results-dir", str(folder)]
    out = runner.invoke(app, [*args, "--json"])
    assert out.exit_code == 0, out.stderr
    assert json.loads(out.stdout)["results_dir"] == str(folder)
    text = runner.invoke(app, args)
    assert f"into{folder}/<runid>" in "".join(text.stdout.split())  # however Rich wraps it


def test_dry_run_names_a_missing_model_directory_instead_of_planning_for_it(tmp_path):
    missing = tmp_path / "no" / "model"
    out = runner.invoke(app, ["run", "--dry-run", "--concepts", "2", "--model", str(missing)])
    assert out.exit_code != 0
    said = "".join((out.stdout + out.stderr).split())
    assert "does not exist" in " ".join((out.stdout + out.stderr).split())
    assert str(missing) in said
    assert "rows" not in out.stdout  # no plan was printed


def test_dry_run_without_a_store_says_why_there_is_no_estimate(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'none.db'}")
    out = runner.invoke(app, ["run", "--dry-run", "--concepts", "2"])
    assert out.exit_code == 0
    assert "no time estimate: no MLflow store at" in " ".join(out.stdout.split())
    assert not (tmp_path / "none.db").exists()  # a dry run creates no store


def test_a_missing_model_directory_is_one_line_on_the_command_line(mlflow_store, tmp_path):
    out = runner.invoke(
        app,
        [
            "classifiers",
            "--model",
            "./no/such/model",
            "--concepts",
            "2",
            "--set",
            f"classifier.dir={tmp_path}",
        ],
    )
    assert out.exit_code == 2
    assert "error: model directory './no/such/model' does not exist" in " ".join(out.stderr.split())
