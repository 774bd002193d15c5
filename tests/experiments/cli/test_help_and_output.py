"""The command line's surface: --version, light --help, results on stdout, --json."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from experiments.cli import app

REPO = Path(__file__).resolve().parents[3]
HEAVY = ("torch", "transformers", "mlflow", "pandas", "numpy", "sentence_transformers")
runner = CliRunner()


def test_version():
    out = runner.invoke(app, ["--version"])
    assert out.exit_code == 0 and out.stdout.startswith("steer-eval ")


def test_no_commands_help_imports_anything_heavy():
    """Every command's and sub-command's --help prints without importing torch,
    transformers, mlflow, pandas or numpy: those load when a command runs. (Importing the
    CLI itself must not load them either: tests/test_architecture.py checks torch.)"""
    code = f"""
import sys
from experiments.cli import app
import typer

def heavy():
    return {{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})

before = heavy()
group = typer.main.get_command(app)
names = []
for name, command in group.commands.items():
    subs = getattr(command, "commands", None)
    names += [[name, sub] for sub in subs] if subs else [[name]]
for argv in [[]] + names:
    try:
        app([*argv, "--help"])
    except SystemExit:
        pass
print("COMMANDS", len(names), "ADDED", sorted(heavy() - before))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    last = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-2000:]
    assert last.endswith("ADDED []") and int(last.split()[1]) >= 10, last


def test_results_go_to_stdout_and_messages_to_stderr(mlflow_store):
    """An error is a message on stderr; stdout stays clean for --json consumers."""
    out = runner.invoke(app, ["rescore", "0" * 32, "--json"])
    assert out.exit_code == 2
    assert out.stdout == "" and "error" in out.stderr
