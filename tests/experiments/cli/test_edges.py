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
    assert "no estimate: no MLflow store at" in " ".join(out.stdout.split())
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


def test_ui_serves_light_and_run_says_when_it_is_not_running(tmp_path):
    """``steer-eval ui`` starts one server worker and no job runner (it was 15 processes,
    2.6 GB); the address printed for a run says when no UI serves it."""
    import signal
    import time
    import urllib.request

    import psutil

    from experiments.cli.common import UI_NOT_RUNNING, ui_running
    from experiments.tracking.store import served_ui, ui_file

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    assert not ui_running(base)
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlruns.db'}",
        "MLFLOW_ARTIFACT_ROOT": str(tmp_path / "mlartifacts"),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "experiments", "ui", "--port", str(port)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 180
        while not ui_running(base):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.5)
        time.sleep(3)  # a job runner, when there is one, starts beside the first worker
        with urllib.request.urlopen(base + "/", timeout=10) as page:
            assert page.status == 200
        tree = psutil.Process(proc.pid).children(recursive=True)
        commands = [" ".join(p.cmdline()) for p in tree]
        assert len(tree) == 2, commands  # mlflow ui and its one uvicorn worker
        assert not any("huey" in c or "_job_runner" in c for c in commands), commands
        # the port it serves on, beside the store: what other commands' addresses name
        assert served_ui(tmp_path / "mlruns.db") == base
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert not ui_running(base)
    assert (
        served_ui(tmp_path / "mlruns.db") is None and not ui_file(tmp_path / "mlruns.db").exists()
    )
    assert "start it with `steer-eval ui`" in UI_NOT_RUNNING


def test_a_study_stage_stays_as_a_line_with_its_elapsed_time(monkeypatch):
    """calibrate and identify print each stage (and where β came from) as a line, not
    only on the spinner, which a log does not keep."""
    import io
    import time

    from rich.console import Console

    from experiments.cli import common

    recorder = Console(record=True, file=io.StringIO(), width=120)
    monkeypatch.setattr(common, "console", recorder)
    said = "L9-classifier: β 0.1 from the recorded range"
    with recorder.status("study") as status:
        common.say_stage(status, said, time.monotonic() - 65)
    assert f"1:05 {said}" in recorder.export_text()
